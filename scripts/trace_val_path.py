"""The path of one `detect.val` call through the package, traced as it runs: the modules it stays in, in order, and
how often it returns to a module it had already left (docs/architecture.md, "Validation's path").

    python scripts/trace_val_path.py [--data shapes.yaml] [--imgsz 64] [--list]

It scores an untrained yolov5n (as many classes as the data yaml names) on the val split of `--data` (by default the
built-in shapes dataset, generated on first use where $DETECT_DATA_DIR says; any data yaml: a folder, a COCO json split
as coco128.yaml's val_json, a bucket's s3:// path) on the CPU, loader workers 0. A first, untraced call generates the
data and writes the label cache, so that the traced second one follows the usual path; it follows
`validate(settings)` with sys.setprofile: the first call of each function defined under detect/ is recorded in order
(calls in other threads, e.g. the label check's pool, are not seen); consecutive calls in one module make one stay.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import detect

PACKAGE = Path(detect.__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class Walk:
    """The modules a call stayed in, in order (a stay: one or more consecutive calls in one module)."""

    stays: tuple[str, ...]  # module paths relative to detect/, e.g. "evaluation/evaluator.py"

    @property
    def modules(self) -> int:
        return len(set(self.stays))

    @property
    def returns(self) -> int:
        """Stays in a module the path had already left."""
        return len(self.stays) - self.modules

    def lines(self) -> list[str]:
        """One line per stay, a return marked with its visit number."""
        seen: dict[str, int] = {}
        lines = []
        for number, module in enumerate(self.stays, 1):
            seen[module] = seen.get(module, 0) + 1
            lines.append(f"{number:3d}. {module}" + (f"  (visit {seen[module]})" if seen[module] > 1 else ""))
        return lines

    def summary(self) -> str:
        return f"{len(self.stays)} stays in {self.modules} modules, {self.returns} returns to a module already left"


def traced_calls(function: Callable[..., Any], *args: Any) -> tuple[Any, list[tuple[str, str]]]:
    """`function(*args)`'s result and the (module, function) of each first call of a function under detect/, in the
    order they came (this thread only)."""
    first_calls: dict[tuple[str, int], tuple[str, str]] = {}
    modules: dict[str, str | None] = {}

    def module_of(filename: str) -> str | None:
        if filename not in modules:
            path = Path(filename).resolve()
            modules[filename] = path.relative_to(PACKAGE).as_posix() if path.is_relative_to(PACKAGE) else None
        return modules[filename]

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        key = (code.co_filename, code.co_firstlineno)
        if key not in first_calls:
            module = module_of(code.co_filename)
            if module is not None:
                first_calls[key] = (module, code.co_qualname)

    sys.setprofile(profile)
    try:
        result = function(*args)
    finally:
        sys.setprofile(None)
    return result, list(first_calls.values())


def walk_of(calls: list[tuple[str, str]]) -> Walk:
    """The stays of a list of calls: consecutive calls in one module collapse into one."""
    stays: list[str] = []
    for module, _ in calls:
        if not stays or stays[-1] != module:
            stays.append(module)
    return Walk(tuple(stays))


def tiny_validation(folder: Path, imgsz: int = 64, data: str = "shapes.yaml") -> tuple[Callable[..., Any], Any]:
    """`detect.val.validate` and its settings: an untrained yolov5n for `data`'s classes, saved in `folder`, scored on
    the CPU with results under `folder`."""
    from detect import val
    from detect.data.data_config import load_data_config
    from detect.models import build_model
    from detect.models.safe_io import save_checkpoint
    from detect.models.weights import weights_payload

    names = list(load_data_config(data).names)
    model = build_model("yolov5n.yaml", num_classes=len(names), names=names)
    weights = save_checkpoint(folder / "untrained.pt", weights_payload(model))
    settings = val.parse_args(["--weights", str(weights), "--data", data, "--imgsz", str(imgsz),
                               "--device", "cpu", "--workers", "0", "--project", str(folder / "runs"),
                               "--cache-dir", str(folder / "caches"), "--no-progress"])
    return val.validate, settings


def trace_validation(folder: Path, imgsz: int = 64, data: str = "shapes.yaml") -> Walk:
    """The walk of one tiny `detect.val` call (tiny_validation) after an untraced first one, its files in `folder`."""
    validate, settings = tiny_validation(folder, imgsz, data)
    validate(settings)
    _, calls = traced_calls(validate, dataclasses.replace(settings, name="traced"))
    return walk_of(calls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="shapes.yaml", help="the data yaml whose val split is scored")
    parser.add_argument("--imgsz", type=int, default=64)
    parser.add_argument("--list", action="store_true", help="print every stay, not only the counts")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        walk = trace_validation(Path(folder), args.imgsz, args.data)
    if args.list:
        print("\n".join(walk.lines()))
    print(walk.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
