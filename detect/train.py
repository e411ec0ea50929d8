"""`python -m detect.train`: train YOLOv5 (one process, or many under torchrun) with yolov5's options.

The flags are made from TrainSettings (detect/training/settings.py: names, defaults, ranges, help), and so is
`run(**options)`, the Python API: `from detect import train; train.run(cfg="yolov5n.yaml", epochs=3)`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import types
import typing
from typing import Any

from detect import cli
from detect.backend.profiler import ProfileSchedule
from detect.errors import UserError
from detect.evolution import EVOLVE_PROJECT, SAMPLERS, EvolveResult, evolve
from detect.training.distributed import DistContext
from detect.training.settings import TrainSettings, flag_name, resume_fields
from detect.training.trainer import FitResult, Trainer


def _flag_options(field: dataclasses.Field, annotation: Any) -> dict[str, Any]:
    """argparse keywords for one TrainSettings field; the default is left out (SUPPRESS): only given flags count."""
    meta = field.metadata
    shown = "" if field.default in (None, False, True) else f" (default {field.default!r})"
    options: dict[str, Any] = {"default": argparse.SUPPRESS, "dest": field.name, "help": meta["help"] + shown}
    kind = annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # X | None
        kind = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    if field.name == "progress":
        return {**options, "action": "store_false"}
    if kind is bool:
        return {**options, "action": argparse.BooleanOptionalAction if field.default is None else "store_true"}
    if typing.get_origin(kind) is tuple:
        kind, options["nargs"] = typing.get_args(kind)[0], "+"
    if meta["const"] is not None:
        options.update(nargs="?", const=meta["const"])
    if meta["choices"] is not None:
        options["choices"] = meta["choices"]
    options["type"] = cli.bounded(kind, meta["bound"]) if meta["bound"] is not None else kind
    return options


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = cli.ArgumentParser(prog="python -m detect.train", description=__doc__.split("\n\n")[0])
    hints = typing.get_type_hints(TrainSettings)
    for field in dataclasses.fields(TrainSettings):
        parser.add_argument(*(field.metadata["flags"] or (flag_name(field),)), **_flag_options(field, hints[field.name]))
    parser.add_argument("--resume", nargs="?", const=True, default=False,
                        help="continue the latest run of --project, or the given last.pt, exactly where it stopped "
                             f"(only {', '.join(flag_name(f) for f in dataclasses.fields(TrainSettings) if f.name in resume_fields())} "
                             "may be given again)")
    parser.add_argument("--evolve", type=cli.positive_int, default=None, metavar="N",
                        help=f"evolve the hyp: N short runs with Optuna's proposals ({EVOLVE_PROJECT}/<name> unless "
                             "--project; started again, a study continues)")
    parser.add_argument("--evolve-sampler", default="tpe", choices=SAMPLERS, help="Optuna's sampler for --evolve")
    parser.add_argument("--evolve-storage", default=None, metavar="URL",
                        help="an Optuna storage URL that several processes or machines share (default: the study "
                             "folder's study.db)")
    parser.add_argument("--profile", nargs="*", type=cli.non_negative_int, default=None, metavar="N",
                        help="profile the first epoch: skip WAIT steps, warm up WARMUP, record ACTIVE (default 3 1 3); "
                             "trace in the run's profile/, top operators and data-loading share printed")
    return parser.parse_args(argv)


def run(resume: bool | str = False, profile: ProfileSchedule | None = None, **options: Any) -> FitResult:
    """Train with the CLI's options as keyword arguments (same names and defaults as TrainSettings); a bad one raises
    UserError with the CLI's one-line message. Returns where the run left its files and its final metrics."""
    settings = TrainSettings.from_dict(options, "detect.train.run")
    context = DistContext.from_env()
    if not context.is_main:  # one voice per job: the other ranks report warnings and errors only
        logging.getLogger().setLevel(logging.WARNING)
    # A resumed run keeps its stored settings except the machine-specific ones given here.
    overrides = {name: options[name] for name in resume_fields() if name in options}
    return Trainer(settings, context, resume=resume, resume_overrides=overrides, profile=profile).fit()


def _run_args(args: argparse.Namespace) -> FitResult | EvolveResult:
    options = vars(args)
    resume, profile = options.pop("resume"), options.pop("profile")
    trials, sampler, storage = options.pop("evolve"), options.pop("evolve_sampler"), options.pop("evolve_storage")
    if "freeze" in options:
        options["freeze"] = tuple(options["freeze"])
    if trials is None:
        return run(resume=resume, profile=None if profile is None else ProfileSchedule.from_flag(profile), **options)
    if resume or profile is not None:
        raise UserError("--evolve goes without --resume and --profile: started again, a study continues by itself")
    settings = TrainSettings.from_dict({"project": EVOLVE_PROJECT, **options}, "python -m detect.train")
    return evolve(settings, trials, sampler, storage)


main = cli.main_for(parse_args, _run_args)

if __name__ == "__main__":
    cli.exit_process(main())
