"""The sizes a reader of detect/ meets, largest first: modules per folder, lines per module, lines per function and
parameters per public function, each against the guidance of docs/architecture.md ("Sizes"). They guide; only the
reader's guards are tests (tests/test_layering.py: no import upward, sideways or in a circle, functions of at most 60
lines, public functions of at most 8 parameters unless said why).

    python scripts/structure_figures.py            # the 10 largest of each
    python scripts/structure_figures.py --top 0    # every folder, module and function
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "detect"
GUIDANCE = {  # docs/architecture.md, "Sizes"
    "modules per folder": "about a dozen, what a reader takes in at a glance",
    "lines per module": "about 150, up to 400, one job a reader keeps in mind",
    "lines per function": "at most 60, one screen; a test holds it",
    "parameters per public function": "at most 8 unless said why, a test holds it; 4 on the training set-up's path",
}


def parameter_count(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The parameters a caller passes (self and cls not counted; *args and **kwargs one each)."""
    arguments = function.args
    named = [*arguments.posonlyargs, *arguments.args]
    bound = bool(named) and named[0].arg in ("self", "cls")
    return len(named) - bound + len(arguments.kwonlyargs) + (arguments.vararg is not None) + (
        arguments.kwarg is not None)


def functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def figures(package: Path = PACKAGE) -> dict[str, list[tuple[str, int]]]:
    """Each measure's (name, figure) rows, largest first; names are paths from the repository's root."""
    modules = sorted(package.rglob("*.py"))

    def name(path: Path) -> str:
        return path.relative_to(package.parent).as_posix()

    folders = sorted({path.parent for path in modules})
    rows = {
        "modules per folder": [(name(folder), len(list(folder.glob("*.py")))) for folder in folders],
        "lines per module": [(name(path), len(path.read_text().splitlines())) for path in modules],
        "lines per function": [(f"{name(path)}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1)
                               for path in modules for node in functions(path)],
        "parameters per public function": [(f"{name(path)}:{node.lineno} {node.name}", parameter_count(node))
                                           for path in modules for node in functions(path)
                                           if not node.name.startswith("_")],
    }
    return {measure: sorted(found, key=lambda row: (-row[1], row[0])) for measure, found in rows.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=10, help="rows per measure (0: all)")
    args = parser.parse_args(argv)
    for measure, rows in figures().items():
        print(f"{measure} ({GUIDANCE[measure]}):")
        for row_name, figure in rows[:args.top or None]:
            print(f"  {figure:5d}  {row_name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
