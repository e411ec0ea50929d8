"""Device literals ("npu", "cuda", torch_npu, torch.cuda) appear in code only under detect/backend/
(docs/architecture.md, "One place per device").

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

from tests.scripts.modules import script

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


# The one layering rule (docs/architecture.md "Floors", which tests/test_readme.py holds to FLOORS): a
# module imports only from its own package or from lower floors; packages of one floor never import each other;
# nothing imports floor 8 (the CLIs and tools). errors is below them all: every floor raises them.
FLOORS = {
    "errors": 0,
    "ops": 1, "atomic_file": 1,
    "config": 2, "run_dir": 2,
    "backend": 3, "data": 3, "models": 3,
    "inference": 4, "exporters": 4,
    "evaluation": 5,
    "training": 6,
    "evolution": 7, "tracking": 7,
    "cli": 8, "train": 8, "val": 8, "predict": 8, "export": 8, "benchmarks": 8, "doctor": 8, "tools": 8, "hub": 8,
    "serve": 8, "track": 8,
}
TOP_FLOOR = max(FLOORS.values())
FIGURES = script("structure_figures")  # the sizes a reader meets, measured (docs/architecture.md, "Sizes")


def allowed_imports(package: str) -> set[str]:
    """The detect packages and modules `package` may import: its own, and every lower floor."""
    floor = FLOORS[package]
    return {package} | {name for name, other in FLOORS.items() if other < floor}


def _imported_modules(path: Path) -> set[str]:
    """The detect modules a file imports, dotted (including imports inside functions)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("detect"):
            # `from detect import cli` and `from detect.data import loader` may name modules or objects
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names if alias.name.startswith("detect"))
    return modules


def _detect_imports(path: Path) -> set[str]:
    """The detect subpackages and top-level modules a file imports."""
    return {name.split(".")[1] for name in _imported_modules(path) if name.count(".") >= 1} & set(FLOORS)


def test_every_package_has_a_floor():
    names = {path.stem for path in PACKAGE.glob("*.py")} | {path.name for path in PACKAGE.iterdir() if path.is_dir()}
    unknown = names - set(FLOORS) - {"__init__", "__main__", "__pycache__", "configs"}  # configs/: yaml, no code
    assert not unknown, f"give these a floor in FLOORS: {sorted(unknown)}"


@pytest.mark.parametrize("package", sorted(name for name, floor in FLOORS.items() if floor < TOP_FLOOR))
def test_no_package_imports_upward_or_sideways(package):
    paths = sorted((PACKAGE / package).rglob("*.py")) or [PACKAGE / f"{package}.py"]
    for path in paths:
        allowed = allowed_imports(package) | ({"cli"} if path.name == "__main__.py" else set())  # a CLI of its own
        upward = _detect_imports(path) - allowed
        assert not upward, f"{path.relative_to(PACKAGE.parent)} imports detect.{sorted(upward)}"


def test_nothing_imports_a_cli():
    clis = {name for name, floor in FLOORS.items() if floor == TOP_FLOOR} - {"cli"}
    for path in sorted(PACKAGE.rglob("*.py")):
        own = {path.relative_to(PACKAGE).parts[0]}  # a package's modules may share code (the tools do)
        assert not _detect_imports(path) & clis - own, f"{path.relative_to(PACKAGE.parent)} imports a CLI"


def module_graph() -> dict[str, set[str]]:
    """Module -> the detect modules it imports, at module level or inside functions, packages included."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return {name: {imported for imported in _imported_modules(path) if imported in modules and imported != name}
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph[node]):
            if state.get(successor) == 1:
                return path[path.index(successor):] + [successor]
            if successor not in state and (cycle := visit(successor)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_a_circle_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_between_modules():
    # A package's __init__ that re-exports its modules counts: a module importing its own package closes a circle.
    cycle = find_cycle(module_graph())
    assert cycle is None, " -> ".join(cycle)


# docs/architecture.md, "Floors": a public function takes at most 8 parameters, unless the comment right above it
# says why ("... on purpose": a settings object would only rename them); at most 3 do.
MAX_PARAMETERS = 8
MAX_WIDE_FUNCTIONS = 3
MAX_FUNCTION_LINES = 60  # docs/architecture.md, "Sizes": one screen
MAX_EPOCH_LINES = 45  # train_one_epoch: the step in view, the bookkeeping in named helpers


def wide_functions() -> list[tuple[Path, ast.FunctionDef, bool]]:
    """(file, function, whether the comment above it says why) for each public function over MAX_PARAMETERS."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_")
                    and FIGURES.parameter_count(node) > MAX_PARAMETERS):
                first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
                comment = []
                for line in reversed(lines[:first - 1]):
                    if not line.lstrip().startswith("#"):
                        break
                    comment.insert(0, line.lstrip("# "))
                found.append((path, node, "on purpose" in " ".join(comment)))
    return found


def test_parameter_count_counts_what_a_caller_passes():
    method = ast.parse("class A:\n    def f(self, a, /, b, *rest, c, **extra): ...").body[0].body[0]
    assert FIGURES.parameter_count(method) == 5


def test_public_functions_take_few_parameters_or_say_why():
    wide = wide_functions()
    unexplained = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}" for path, node, why in wide
                   if not why]
    assert not unexplained, f"over {MAX_PARAMETERS} parameters with no '... on purpose' comment above: {unexplained}"
    assert len(wide) <= MAX_WIDE_FUNCTIONS, [node.name for _, node, _ in wide]


def test_functions_fit_on_a_screen():
    long = [row for row in FIGURES.figures(PACKAGE)["lines per function"] if row[1] > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_train_one_epoch_stays_short():
    node = next(node for node in ast.walk(ast.parse((PACKAGE / "training" / "epoch.py").read_text()))
                if isinstance(node, ast.FunctionDef) and node.name == "train_one_epoch")
    assert node.end_lineno - node.lineno + 1 <= MAX_EPOCH_LINES


# docs/architecture.md, "Training's set-up path": the settings are read in training/setup/recipe.py alone, and the
# set-up's functions take at most 4 parameters (a fifth is a sign that a value of the recipe or a typed group is
# missing).
SET_UP = PACKAGE / "training" / "setup"
RESOLVING_MODULE = SET_UP / "recipe.py"
SET_UP_MODULES = [*sorted(SET_UP.glob("*.py")), PACKAGE / "training" / "step.py", PACKAGE / "models" / "transfer.py"]
MAX_SET_UP_PARAMETERS = 4


def setting_reads(source: str) -> list[tuple[int, str]]:
    """(line, 'settings.<name>') for each read of a setting: an attribute of a name or attribute called `settings`
    (writing the settings whole, `settings.to_dict()`, is no read of one)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr != "to_dict" and (
                isinstance(node.value, ast.Name) and node.value.id == "settings"
                or isinstance(node.value, ast.Attribute) and node.value.attr == "settings"):
            found.append((node.lineno, f"settings.{node.attr}"))
    return found


def test_setting_reads_are_found():
    assert setting_reads("run.settings.epochs\nsettings.imgsz\nsettings.to_dict()\nrun.loop.epochs") == [
        (1, "settings.epochs"), (2, "settings.imgsz")]


def test_training_reads_its_settings_in_the_recipe_alone():
    readers = [*sorted((PACKAGE / "training").rglob("*.py")), PACKAGE / "tracking.py"]  # and the tracker of a run
    found = [f"{path.relative_to(PACKAGE.parent)}:{line} {read}" for path in readers if path != RESOLVING_MODULE
             for line, read in setting_reads(path.read_text())]
    assert not found, f"settings read outside {RESOLVING_MODULE.name}: {found}"


def test_set_up_functions_take_at_most_four_parameters():
    wide = [f"{path.name}:{node.lineno} {node.name}" for path in SET_UP_MODULES
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and FIGURES.parameter_count(node) > MAX_SET_UP_PARAMETERS]
    assert not wide, f"set-up functions over {MAX_SET_UP_PARAMETERS} parameters: {wide}"
