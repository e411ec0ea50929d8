"""Device literals ("npu", "cuda", torch_npu, torch.cuda) appear in code only under detect/backend/ (STYLE.md rule 1).

Only code is checked: NAME tokens and string literals, found with tokenize. Comments and docstrings may mention
devices. Words joined by '_' or '-' (npu_jit_compile, --npu-jit-compile) and upper case prose (NPU) are allowed,
so CLIs can forward backend options; the device kinds themselves must come from detect.backend.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "detect"
ALLOWED = PACKAGE / "backend"
FORBIDDEN_NAMES = {"npu", "cuda", "torch_npu"}  # `torch.cuda` is NAME torch, OP ., NAME cuda
FORBIDDEN_IN_STRINGS = re.compile(r"(?<![\w-])(torch_npu|npu|cuda)(?![\w-])")
STRING_TYPES = {tokenize.STRING} | ({tokenize.FSTRING_MIDDLE} if hasattr(tokenize, "FSTRING_MIDDLE") else set())


def _docstring_lines(source: str) -> set[int]:
    """Lines of string literals that stand alone as statements (docstrings and the like)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def device_literals(source: str) -> list[tuple[int, str]]:
    """(line, token) for each device name or device string in the code of `source`."""
    skip = _docstring_lines(source)
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string in FORBIDDEN_NAMES or token.type in STRING_TYPES and token.start[0] not in skip and FORBIDDEN_IN_STRINGS.search(token.string):
            found.append((token.start[0], token.string))
    return found


def package_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if ALLOWED not in p.parents)


def test_no_device_literals_outside_backend():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
        for path in package_files()
        for line, text in device_literals(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "device literals belong in detect/backend/ only:\n" + "\n".join(offenders)


def test_torch_npu_imported_only_in_npu_backend():
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if any(name.split(".")[0] == "torch_npu" for name in names):
                importers.append(path.relative_to(PACKAGE.parent).as_posix())
    assert set(importers) <= {"detect/backend/npu.py"}, importers


@pytest.mark.parametrize(
    "code",
    [
        "import torch\nok = torch.cuda.is_available()\n",
        'device = torch.device("cuda")\n',
        "if x.device.type == 'npu':\n    pass\n",
        "import torch_npu\n",
        "from torch import cuda\n",
        'spec = f"npu:{rank}"\n',
        "kind = 'cuda:0'\n",
        'message = "run on npu or cuda"\n',
    ],
)
def test_checker_flags_device_code(code):
    assert device_literals(code)


@pytest.mark.parametrize(
    "code",
    [
        '"""Works on npu and cuda alike."""\n',
        "def f():\n    '''Runs on the npu.'''\n    return 1  # cuda too\n",
        "select(spec, npu_jit_compile=True)\n",
        'parser.add_argument("--npu-jit-compile", help="jit compile mode on the NPU")\n',
        "nucleus = 'CUDA-like'\n",
    ],
)
def test_checker_allows_prose_and_option_names(code):
    assert device_literals(code) == []


# The one layering rule (DESIGN.md, README "Layout"): a module imports only from its own floor's package or from
# lower floors; floor 3 packages never import each other; nothing imports floor 5 (the CLIs and tools).
FLOORS = {
    "errors": 1, "ops": 1,
    "config": 2,
    "backend": 3, "data": 3, "models": 3,
    "engine": 4,
    "cli": 5, "train": 5, "val": 5, "predict": 5, "export": 5, "doctor": 5, "tools": 5,
}


def allowed_imports(package: str) -> set[str]:
    """The detect packages and modules `package` may import: its own, and every lower floor."""
    floor = FLOORS[package]
    return {package} | {name for name, other in FLOORS.items() if other < floor}


def _detect_imports(path: Path) -> set[str]:
    """The detect subpackages and modules a file imports (including inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "detect":  # from detect import cli
            modules = [f"detect.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        names.update(m.split(".")[1] for m in modules if m.startswith("detect."))
    return names


def test_every_package_has_a_floor():
    names = {path.stem for path in PACKAGE.glob("*.py")} | {path.name for path in PACKAGE.iterdir() if path.is_dir()}
    unknown = names - set(FLOORS) - {"__init__", "__main__", "__pycache__", "configs"}  # configs/: yaml, no code
    assert not unknown, f"give these a floor in FLOORS: {sorted(unknown)}"


@pytest.mark.parametrize("package", sorted(name for name, floor in FLOORS.items() if floor < 5))
def test_no_package_imports_upward_or_sideways(package):
    paths = sorted((PACKAGE / package).rglob("*.py")) or [PACKAGE / f"{package}.py"]
    for path in paths:
        allowed = allowed_imports(package) | ({"cli"} if path.name == "__main__.py" else set())  # a CLI of its own
        upward = _detect_imports(path) - allowed
        assert not upward, f"{path.relative_to(PACKAGE.parent)} imports detect.{sorted(upward)}"


def test_nothing_imports_a_cli():
    clis = {name for name, floor in FLOORS.items() if floor == 5} - {"cli"}
    for path in sorted(PACKAGE.rglob("*.py")):
        own = {path.relative_to(PACKAGE).parts[0]}  # a package's modules may share code (the tools do)
        assert not _detect_imports(path) & clis - own, f"{path.relative_to(PACKAGE.parent)} imports a CLI"
