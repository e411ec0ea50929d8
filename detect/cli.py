"""What every command-line entry point shares: logging set-up, one-line errors (exit code 2), flag range checks.

A CLI builds its parser with `ArgumentParser` (a bad flag is one line `error: ...`, exit 2, as a UserError is)
and gives numeric flags one of the types below, so that a value out of range stops before any work starts:

    parser = cli.ArgumentParser(prog="python -m detect.val", description=__doc__)
    parser.add_argument("--imgsz", type=cli.positive_int, default=640)
    parser.add_argument("--conf-thres", type=cli.unit_float, default=0.001)
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from detect.errors import UserError


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line on stderr (no usage block) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        """Print `error: <message>` and exit 2 (argparse prints the usage and the program name first)."""
        self.exit(2, f"error: {message}\n")


def _parse(text: str, kind: type, what: str, accept: Callable[[Any], bool]) -> Any:
    """`text` as `kind` when `accept` takes it, else an ArgumentTypeError (argparse: `argument --x: must be ...`)."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not accept(value):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (sizes, counts)."""
    return _parse(text, int, "a positive integer", lambda value: value >= 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0 (worker counts, seeds)."""
    return _parse(text, int, "an integer >= 0", lambda value: value >= 0)


def unit_float(text: str) -> float:
    """An argparse type: a number in [0, 1] (thresholds, fractions); nan is refused (it compares false)."""
    return _parse(text, float, "a number in [0, 1]", lambda value: 0 <= value <= 1)


def add_npu_flags(parser: argparse.ArgumentParser) -> None:
    """The NPU switches backends.select takes; left out, torch_npu's defaults stay (NPU.md §1 #5, §2.1)."""
    parser.add_argument("--npu-jit-compile", action=argparse.BooleanOptionalAction, default=None,
                        help="NPU only: set_compile_mode(jit_compile=...) (910B default: off)")
    parser.add_argument("--npu-allow-hf32", action=argparse.BooleanOptionalAction, default=None,
                        help="NPU only: HF32 in fp32 convolutions and matmuls (910B default: conv on, matmul off)")


def user_message(error: UserError) -> str:
    """The one line of a UserError; one re-raised by a DataLoader worker carries the worker's traceback, whose
    last line is the original error."""
    text = str(error).strip()
    if "Original Traceback" in text:
        text = text.splitlines()[-1].removeprefix(f"{type(error).__module__}.{type(error).__name__}: ")
    return text


def run(main: Callable[[], int | None]) -> int:
    """Run a CLI body; a UserError becomes one line on stderr and exit code 2."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return main() or 0
    except UserError as error:
        print(f"error: {user_message(error)}", file=sys.stderr)
        return 2
