"""What every command-line entry point shares: logging set-up, one-line errors (exit code 2), flag range checks.

A CLI builds its parser with `ArgumentParser` (a bad flag is one line `error: ...`, exit 2, as a UserError is)
and gives numeric flags one of the types below, so that a value out of range stops before any work starts:

    parser = cli.ArgumentParser(prog="python -m detect.val", description=__doc__)
    parser.add_argument("--imgsz", type=cli.positive_int, default=640)
    parser.add_argument("--conf-thres", type=cli.unit_float, default=0.001)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from detect.config import NON_NEGATIVE, POSITIVE, UNIT, Bound
from detect.errors import Interrupted, UserError


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line on stderr (no usage block) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        """Print `error: <message>` and exit 2 (argparse prints the usage and the program name first)."""
        self.exit(2, f"error: {message}\n")


def bounded(kind: type, bound: Bound) -> Callable[[str], Any]:
    """An argparse type: `text` as `kind` when `bound` accepts it, else an ArgumentTypeError (argparse prints
    `argument --x: must be ...`)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not bound.accept(value):
            raise argparse.ArgumentTypeError(f"must be {bound.what}, got {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


positive_int = bounded(int, POSITIVE)  # sizes, counts
non_negative_int = bounded(int, NON_NEGATIVE)  # worker counts, seeds
unit_float = bounded(float, UNIT)  # thresholds, fractions


def options_to_argv(options: dict[str, Any]) -> list[str]:
    """Keyword arguments as the flags that say the same: batch_size=8 -> --batch-size 8, True -> the bare flag,
    False or None -> nothing (the default), a list -> its values after the flag."""
    argv = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, *map(str, value)]
        elif value is not None and value is not False:
            argv += [flag, str(value)]
    return argv


def parse_options(parse_args: Callable[[list[str] | None], argparse.Namespace],
                  options: dict[str, Any]) -> argparse.Namespace:
    """A CLI's flags from keyword arguments (a Python API with the CLI's names, defaults and checks); a bad one
    raises UserError with the line the CLI would print."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return parse_args(options_to_argv(options))
    except SystemExit:
        raise UserError(stderr.getvalue().strip().removeprefix("error: ")) from None


def main_for(parse_args: Callable[[list[str] | None], argparse.Namespace],
             run_args: Callable[[argparse.Namespace], object]) -> Callable[[list[str] | None], int]:
    """A CLI's `main(argv=None) -> int`: parse the flags (argparse stops a bad one itself, exit 2), then run them;
    what run_args returns is for Python callers, the CLI's exit code is 0, or 2 after a UserError's one line."""
    def main(argv: list[str] | None = None) -> int:
        args = parse_args(argv)

        def body() -> None:
            run_args(args)

        return run(body)

    return main


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
    """Run a CLI body; a UserError becomes one line on stderr and exit code 2, a run stopped by a signal its one
    line and 128 + the signal (130 for Ctrl-C, 143 for SIGTERM), a second Ctrl-C 130 without a traceback."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return main() or 0
    except UserError as error:
        print(f"error: {user_message(error)}", file=sys.stderr)
        return 2
    except Interrupted as stopped:
        print(stopped, file=sys.stderr)
        _end_at_once_on_ctrl_c()
        return stopped.exit_code
    except (KeyboardInterrupt, Exception) as error:  # also clean-up that a Ctrl-C cut short failing in turn
        if not _after_ctrl_c(error):
            raise
        print("interrupted", file=sys.stderr)
        _end_at_once_on_ctrl_c()
        return 128 + signal.SIGINT


def exit_process(code: int) -> NoReturn:
    """End a `python -m detect.*` process with `code`, leaving out the garbage collection of interpreter shutdown:
    with torch loaded it took 0.3-0.6 s of every run (`python -c "import detect.val"`: 2.1 s, 1.5-1.8 s with
    gc.freeze() last). atexit handlers, weakref finalizers and the flushing of open files still run."""
    gc.freeze()
    sys.exit(code)


def _after_ctrl_c(error: BaseException) -> bool:
    """Whether `error` is a KeyboardInterrupt or was raised while one was handled (anywhere down its chain)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__context__
    return False


def _end_at_once_on_ctrl_c() -> None:
    """After a stop the process only winds down (loader workers, torch's exit hooks): a Ctrl-C then ends it at once
    with 130, where Python would raise KeyboardInterrupt inside those hooks and print their traceback."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, lambda number, _frame: os._exit(128 + number))
