"""`python -m detect.train`: train YOLOv5 (one process, one rank per device of `--device 0,1,...`, or many under
torchrun) with yolov5's options.

The flags are made from TrainSettings (detect/training/settings.py: names, defaults, ranges, help), and so is
`run(**options)`, the Python API: `from detect import train; train.run(cfg="yolov5n.yaml", epochs=3)`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from detect import backend as backends
from detect import cli
from detect.backend.profiler import ProfileSchedule
from detect.config import flag_name
from detect.errors import UserError
from detect.evolution import EVOLVE_PROJECT, SAMPLERS, EvolveResult, evolve
from detect.tracking import tracking_hooks
from detect.training.distributed import DistContext, launch_ranks, one_voice
from detect.training.hooks import Hook
from detect.training.settings import Resume, TrainSettings, resume_fields
from detect.training.trainer import FitResult, Trainer

LOGGER = logging.getLogger("detect.train")
YOLOV5_EVOLVE_TRIALS = 300  # a bare --evolve (yolov5's default generations)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = cli.settings_parser(TrainSettings, "python -m detect.train", __doc__.split("\n\n")[0], no_ops=(
        "--entity", "--upload_dataset", "--bbox_interval", "--artifact_alias", "--bucket"))
    again = ", ".join(flag_name(field) for field in dataclasses.fields(TrainSettings) if field.name in resume_fields())
    parser.add_argument("--resume", nargs="?", const=True, default=False,
                        help="continue the latest run of --project, or the given run folder or last.pt, exactly "
                             f"where it stopped (only {again} may be given again)")
    parser.add_argument("--evolve", type=cli.positive_int, nargs="?", const=YOLOV5_EVOLVE_TRIALS, default=None,
                        metavar="N", help=f"evolve the hyp: N short runs with Optuna's proposals (bare: "
                                          f"{YOLOV5_EVOLVE_TRIALS}, as yolov5; {EVOLVE_PROJECT}/<name> unless "
                                          "--project; started again, a study continues)")
    parser.add_argument("--evolve-sampler", default="tpe", choices=SAMPLERS, help="Optuna's sampler for --evolve")
    parser.add_argument("--evolve-storage", default=None, metavar="URL",
                        help="an Optuna storage URL that several processes or machines share (default: the study "
                             "folder's study.db)")
    parser.add_argument("--profile", nargs="*", type=cli.non_negative_int, default=None, metavar="N",
                        help="profile the first epoch: skip WAIT steps, warm up WARMUP, record ACTIVE (default 3 1 3); "
                             "trace in the run's profile/, top operators and data-loading share printed")
    parser.add_argument("--mlflow", action="store_true",
                        help="track the run in MLflow: MLFLOW_TRACKING_URI (which also turns this on), else ./mlruns "
                             "(pip install 'detect-trainer[mlflow]')")
    parser.add_argument("--local_rank", "--local-rank", type=cli.non_negative_int, default=None, dest="local_rank",
                        help="accepted from launchers that pass it (torch.distributed.launch); torchrun's LOCAL_RANK "
                             "environment variable wins")
    return parser.parse_args(argv)


def run(*, resume: bool | str = False, profile: ProfileSchedule | None = None, callbacks: Sequence[Hook] = (),
        mlflow: bool = False, **options: Any) -> FitResult:
    """Train with the CLI's options as keyword arguments (same names and defaults as TrainSettings); a bad one raises
    UserError with the CLI's one-line message. `resume`: as --resume, True for the newest run of `project`, or a run
    folder or last.pt. `callbacks`: your hooks (detect.training.hooks.Hook), called at every hook point after the
    trainer's own. `mlflow`: track the run in MLflow (also on when MLFLOW_TRACKING_URI is set).
    Returns where the run left its files and its final metrics."""
    settings, resume_from = TrainSettings.from_dict(options, "detect.train.run"), Resume.parse(resume)
    context = DistContext.from_env()
    one_voice(context)  # until the job knows its main rank (build_run sets it again)
    # A resumed run keeps its stored settings except the machine-specific ones given here.
    overrides = {name: options[name] for name in resume_fields() if name in options}
    return Trainer(settings, context, resume=resume_from, resume_overrides=overrides, profile=profile,
                   callbacks=[*tracking_hooks(mlflow), *callbacks]).fit()


def _agree_on_local_rank(flag: int | None) -> None:
    """--local_rank as old launchers pass it: LOCAL_RANK from the environment wins (one line if they differ); without
    it, the flag's value stands in for it."""
    if flag is None:
        return
    given = os.environ.get("LOCAL_RANK")
    if given is None:
        os.environ["LOCAL_RANK"] = str(flag)
    elif given != str(flag):
        LOGGER.info("--local_rank %d differs from LOCAL_RANK=%s in the environment: using %s", flag, given, given)


def _run_args(args: argparse.Namespace) -> FitResult | EvolveResult:
    options = cli.drop_no_ops(vars(args))
    resume, profile, mlflow = options.pop("resume"), options.pop("profile"), options.pop("mlflow")
    trials, sampler, storage = options.pop("evolve"), options.pop("evolve_sampler"), options.pop("evolve_storage")
    _agree_on_local_rank(options.pop("local_rank"))
    if trials is None:
        return run(resume=resume, profile=None if profile is None else ProfileSchedule.from_flag(profile),
                   mlflow=mlflow, **options)
    if resume or profile is not None:
        raise UserError("--evolve goes without --resume and --profile: started again, a study continues by itself")
    settings = TrainSettings.from_dict({"project": EVOLVE_PROJECT, **options}, "python -m detect.train")
    return evolve(settings, trials, sampler, storage)


def _evolve_alone(devices: backends.DeviceRequest) -> None:
    """--evolve runs each trial in one process (as yolov5, which refuses it under DDP): several ranks would each ask
    the study for a trial and train one job with mixed hyps. Processes that share a study spread it over devices."""
    ranks = int(os.environ.get("WORLD_SIZE", "1"))
    if ranks > 1 or len(devices.indices) > 1:
        where = f"{ranks} torchrun ranks" if ranks > 1 else f"--device {','.join(map(str, devices.indices))}"
        raise UserError(f"--evolve runs each trial in one process, not on {where}: start one process per device "
                        "(--device N), each with the same command, and they share the study")


def main(argv: list[str] | None = None) -> int:
    """Parse the flags; `--device 0,1,...` outside torchrun starts one rank per device (torch's elastic launcher),
    each running this same command line; anything else trains in this process."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)

    def body() -> None:
        devices = backends.parse_devices(getattr(args, "device", TrainSettings.device))
        if args.evolve is not None:
            _evolve_alone(devices)
        if len(devices.indices) > 1 and "WORLD_SIZE" not in os.environ:
            launch_ranks(argv, devices)
        else:
            _run_args(args)

    return cli.run(body)


if __name__ == "__main__":
    cli.exit_process(main())
