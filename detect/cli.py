"""What every command-line entry point shares: flags made from a settings dataclass, logging set-up, one-line errors
(exit code 2), flag range checks.

A CLI's flags come from its settings dataclass (fields made with detect.config.option), which owns the names,
defaults, ranges and help; the same class checks the Python API's keyword arguments:

    parse_args = cli.settings_reader(ValSettings, "python -m detect.val", __doc__)   # argv -> ValSettings
    main = cli.main_for(parse_args, validate)                                          # the CLI: parse, then run
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import re
import signal
import sys
import types
import typing
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from detect import atomic_file
from detect.config import NON_NEGATIVE, POSITIVE, UNIT, Bound, flag_name, options_from_dict, settings_fields
from detect.errors import Interrupted, UserError, short_repr

T = TypeVar("T")
# yolov5's other spellings of our flags, added to every CLI whose settings have the field (yolov5 users type them).
YOLOV5_SPELLINGS = {"imgsz": ("--img", "--img-size"), "batch_size": ("--batch",), "conf_thres": ("--conf",),
                    "iou_thres": ("--iou",)}
# yolov5 flags for services detect does not talk to and runtimes it does not use: accepted, so that a yolov5 command
# line runs as written, and each named in one line; nothing a run computes depends on them. flag -> (argparse nargs
# or 0 for a switch, what it is in yolov5).
YOLOV5_NO_OPS: dict[str, tuple[Any, str]] = {
    "--entity": (None, "Weights & Biases logging"), "--upload_dataset": ("?", "Weights & Biases logging"),
    "--bbox_interval": (None, "Weights & Biases logging"),
    "--artifact_alias": (None, "Weights & Biases logging (yolov5 v6)"),
    "--bucket": (None, "a Google Cloud Storage bucket"),
    "--dnn": (0, "OpenCV DNN inference of ONNX (detect runs ONNX in onnxruntime)"),
    "--update": (0, "stripping optimizers from the weights (detect's best.pt holds none)"),
    "--data": (None, "predict's class names (detect takes them from the weights)"),
    "--inplace": (0, "in-place Detect ops (detect's export graph is the same either way)"),
    "--workspace": (None, "TensorRT's workspace"), "--verbose": (0, "TensorRT's log level"),
}
_NO_OP = "yolov5_no_op:"  # the argparse dest prefix of YOLOV5_NO_OPS flags


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line on stderr (no usage block) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        """Print `error: <message>` and exit 2 (argparse prints the usage and the program name first); a flag with
        aliases is named by its first spelling ("argument --imgsz", not "argument --imgsz/--img/--img-size")."""
        message = re.sub(r"^argument (-[\w-]+)(?:/-[\w-]+)+:", r"argument \1:", message)
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
            raise argparse.ArgumentTypeError(f"must be {bound.what}, got {short_repr(text)}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


positive_int = bounded(int, POSITIVE)  # sizes, counts
non_negative_int = bounded(int, NON_NEGATIVE)  # worker counts, seeds
unit_float = bounded(float, UNIT)  # thresholds, fractions


def _flag_options(field: dataclasses.Field, annotation: Any) -> dict[str, Any]:
    """argparse keywords for one settings field; the default is left out (SUPPRESS): only given flags count, and the
    dataclass supplies the rest."""
    meta = field.metadata
    shown = "" if field.default in (None, False, True, dataclasses.MISSING) else f" (default {field.default!r})"
    options: dict[str, Any] = {"default": argparse.SUPPRESS, "dest": field.name, "help": meta["help"] + shown}
    if field.default is dataclasses.MISSING:
        options["required"] = True
    kind = annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # X | None
        kind = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    if kind is bool:
        if flag_name(field).startswith("--no-"):  # a field on by default, switched off by its --no- flag
            return {**options, "action": "store_false"}
        return {**options, "action": argparse.BooleanOptionalAction if field.default is None else "store_true"}
    if typing.get_origin(kind) is tuple:
        kind, options["nargs"] = typing.get_args(kind)[0], "+"
    if meta["const"] is not None:
        options.update(nargs="?", const=meta["const"])
    if meta["choices"] is not None:
        options["choices"] = meta["choices"]
    options["type"] = bounded(kind, meta["bound"]) if meta["bound"] is not None else kind
    return options


def add_settings_flags(parser: argparse.ArgumentParser, settings_class: type) -> None:
    """One flag per field of `settings_class` (config.settings_fields' order), with its aliases and yolov5's spellings
    of it."""
    hints = typing.get_type_hints(settings_class)
    for field in settings_fields(settings_class):
        flags = field.metadata.get("flags") or (flag_name(field),)
        options = _flag_options(field, hints[field.name])
        if not flags[0].startswith("-"):  # a positional argument: argparse names it by its dest, always required
            options = {key: value for key, value in options.items() if key not in ("dest", "required", "default")}
            parser.add_argument(field.name, **options)
            continue
        flags += tuple(alias for alias in YOLOV5_SPELLINGS.get(field.name, ()) if alias not in flags)
        parser.add_argument(*flags, **options)


def settings_parser(settings_class: type, prog: str, description: str | None,
                    no_ops: tuple[str, ...] = ()) -> ArgumentParser:
    """A CLI's parser with the flags of `settings_class` and the YOLOV5_NO_OPS flags named in `no_ops` (add the
    CLI's own extra flags to it)."""
    parser = ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_settings_flags(parser, settings_class)
    for flag in no_ops:
        nargs, what = YOLOV5_NO_OPS[flag]
        switch = {"action": "store_true"} if nargs == 0 else {"nargs": nargs}
        parser.add_argument(flag, dest=_NO_OP + flag, default=argparse.SUPPRESS, help=f"yolov5's option for {what}: "
                            "accepted, does nothing here", **switch)
    return parser


def drop_no_ops(options: dict[str, Any]) -> dict[str, Any]:
    """`options` without the YOLOV5_NO_OPS flags that were given, each named in one info line."""
    for key in [key for key in options if key.startswith(_NO_OP)]:
        flag = key.removeprefix(_NO_OP)
        options.pop(key)
        logging.getLogger("detect").info("%s is yolov5's option for %s: detect does not use it", flag, YOLOV5_NO_OPS[flag][1])
    return options


def settings_reader(settings_class: type[T], prog: str, description: str | None,
                    no_ops: tuple[str, ...] = ()) -> Callable[[list[str] | None], T]:
    """A CLI's `parse_args(argv) -> settings`, its flags made from `settings_class` (see settings_parser)."""
    def parse_args(argv: list[str] | None) -> T:
        return settings_from_args(settings_class, settings_parser(settings_class, prog, description, no_ops)
                                  .parse_args(argv))

    return parse_args


def settings_from_args(settings_class: type[T], args: argparse.Namespace | dict[str, Any]) -> T:
    """The settings the given flags describe (defaults for the rest); a bad value raises UserError naming its flag."""
    options = drop_no_ops(dict(vars(args) if isinstance(args, argparse.Namespace) else args))
    return options_from_dict(settings_class, options, "the command line")


def main_for(parse_args: Callable[[list[str] | None], T],
             run_args: Callable[[T], object]) -> Callable[[list[str] | None], int]:
    """A CLI's `main(argv=None) -> int`: parse the flags (argparse stops a bad one itself, exit 2), then run them;
    what run_args returns is for Python callers, the CLI's exit code is 0, or 2 after a UserError's one line (a bad
    flag value that only the settings' own checks catch included)."""
    def main(argv: list[str] | None = None) -> int:
        def body() -> None:
            run_args(parse_args(argv))

        return run(body)

    return main


def user_message(error: UserError) -> str:
    """The one line of a UserError; one re-raised by a DataLoader worker carries the worker's traceback, whose
    last line is the original error."""
    text = str(error).strip()
    if "Original Traceback" in text:
        text = text.splitlines()[-1].removeprefix(f"{type(error).__module__}.{type(error).__name__}: ")
    return text


def say(line: str) -> None:
    """`line` on stderr in one write. print() writes the text and its newline apart, which an unbuffered stderr
    (PYTHONUNBUFFERED=1) sends as two writes: the ranks of a job that fail at once, sharing the stream, then ran
    their lines together on one line."""
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()


def run(main: Callable[[], int | None]) -> int:
    """Run a CLI body; a UserError becomes one line on stderr and exit code 2, a run stopped by a signal its one
    line and 128 + the signal (130 for Ctrl-C, 143 for SIGTERM), a second Ctrl-C 130 without a traceback."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # faster-coco-eval logs COCOeval's progress and its 12-line summary at INFO on every evaluation; our tables
    # say it (val --verbose prints the 12 stats).
    logging.getLogger("faster_coco_eval").setLevel(logging.WARNING)
    try:
        with atomic_file.command():  # what the command reads is its sources until it ends
            return main() or 0
    except UserError as error:
        say(f"error: {user_message(error)}")
        return 2
    except Interrupted as stopped:
        if str(stopped):  # a torchrun job's line comes from its main rank alone
            say(str(stopped))
        _end_at_once_on_ctrl_c()
        return stopped.exit_code
    except (KeyboardInterrupt, Exception) as error:  # also clean-up that a Ctrl-C cut short failing in turn
        if not _after_ctrl_c(error):
            raise
        say("interrupted")
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
