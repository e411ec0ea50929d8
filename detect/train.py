"""`python -m detect.train`: train YOLOv5 (one process, or many under torchrun) with yolov5's options."""

from __future__ import annotations

import argparse
import logging
import sys

from detect import backend as backends
from detect import cli
from detect.backend.profiler import ProfileSchedule
from detect.training.distributed import DistContext
from detect.training.settings import TrainSettings
from detect.training.trainer import Trainer


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = cli.ArgumentParser(prog="python -m detect.train", description=__doc__)
    add = parser.add_argument
    add("--cfg", default=None, help="model yaml: a bare name in configs/models/ or a path (from scratch)")
    add("--weights", default=None, help="initial weights: ours or an ultralytics/yolov5 .pt (fine-tuning)")
    add("--data", default="shapes.yaml", help="data yaml (default: the built-in shapes dataset)")
    add("--hyp", default="scratch-low.yaml", help="hyper-parameter yaml: a bare name in configs/hyps/ or a path")
    add("--epochs", type=cli.positive_int, default=100)
    add("--batch-size", type=cli.positive_int, default=16, help="total batch size over all ranks")
    add("--imgsz", "--img", "--img-size", type=cli.positive_int, default=640, help="train and val image size")
    add("--device", default=None, help=backends.SPEC_HELP + " (default auto; under torchrun the index is LOCAL_RANK)")
    add("--workers", type=cli.non_negative_int, default=None, help="data loader workers per rank (default 8)")
    add("--project", default="runs/train", help="runs go to project/name")
    add("--name", default="exp")
    add("--exist-ok", action="store_true", help="reuse project/name instead of a new one")
    add("--resume", nargs="?", const=True, default=False,
        help="continue the latest run of --project, or the given last.pt, exactly where it stopped")
    add("--seed", type=cli.non_negative_int, default=0, help="seed of the data order, augmentation and init")
    add("--noval", action="store_true", help="validate only after the final epoch")
    add("--nosave", action="store_true", help="save only the final checkpoint")
    add("--noautoanchor", action="store_true", help="keep the model's anchors (no AutoAnchor check)")
    add("--patience", type=cli.non_negative_int, default=100,
        help="stop after this many epochs without improvement (0: never)")
    add("--freeze", type=cli.non_negative_int, nargs="+", default=[0],
        help="freeze the first N layers, or the listed layers")
    add("--save-period", type=int, default=-1, help="also save weights/epoch<N>.pt every N epochs")
    add("--cos-lr", action="store_true", help="cosine learning-rate schedule (default linear)")
    add("--label-smoothing", type=cli.unit_float, default=0.0)
    add("--multi-scale", action="store_true", help="vary the image size per batch over a fixed set of sizes")
    add("--sync-bn", action="store_true", help="synchronised BatchNorm across ranks (accelerators, DDP only)")
    add("--optimizer", default="SGD", choices=("SGD", "Adam", "AdamW"))
    add("--cache", nargs="?", const="ram", default=None, choices=("ram",), help="decoded images in RAM")
    add("--single-cls", action="store_true", help="train every class as one class, 'item'")
    add("--rect", action="store_true", help="rectangular batches in aspect-ratio order (no mosaic; many shapes)")
    add("--amp", action=argparse.BooleanOptionalAction, default=None,
        help="mixed precision (default: on for accelerators, off on the CPU)")
    cli.add_npu_flags(parser)
    add("--dist-timeout", type=float, default=1800.0, help="seconds any collective may wait (torchrun jobs)")
    add("--no-progress", action="store_true", help="no progress bars (one line per epoch only)")
    add("--profile", nargs="*", type=cli.non_negative_int, default=None, metavar="N",
        help="profile the first epoch: skip WAIT steps, warm up WARMUP, record ACTIVE (default 3 1 3); trace in "
             "the run's profile/, top operators and data-loading share printed")
    return parser.parse_args(argv)


def settings_from_args(args: argparse.Namespace) -> TrainSettings:
    """TrainSettings from the parsed flags (checked there: a bad value is one UserError line)."""
    return TrainSettings(
        cfg=args.cfg, weights=args.weights, data=args.data, hyp=args.hyp, epochs=args.epochs,
        batch_size=args.batch_size, imgsz=args.imgsz, device=args.device or "auto",
        workers=8 if args.workers is None else args.workers,
        project=args.project, name=args.name, exist_ok=args.exist_ok, seed=args.seed, noval=args.noval,
        nosave=args.nosave, noautoanchor=args.noautoanchor, patience=args.patience, freeze=tuple(args.freeze),
        save_period=args.save_period, cos_lr=args.cos_lr, label_smoothing=args.label_smoothing,
        multi_scale=args.multi_scale, sync_bn=args.sync_bn, optimizer=args.optimizer, cache=args.cache,
        single_cls=args.single_cls, rect=args.rect, amp=args.amp, npu_jit_compile=args.npu_jit_compile,
        npu_allow_hf32=args.npu_allow_hf32, dist_timeout=args.dist_timeout,
        progress=not args.no_progress)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def body() -> None:
        context = DistContext.from_env()
        if not context.is_main:  # one voice per job: the other ranks report warnings and errors only
            logging.getLogger().setLevel(logging.WARNING)
        # A resumed run keeps its stored settings except these machine-specific ones, when given here.
        overrides = {name: getattr(args, name) for name in ("device", "workers") if getattr(args, name) is not None}
        overrides["progress"] = not args.no_progress
        profile = None if args.profile is None else ProfileSchedule.from_flag(args.profile)
        Trainer(settings_from_args(args), context, resume=args.resume, resume_overrides=overrides,
                profile=profile).fit()

    return cli.run(body)


if __name__ == "__main__":
    sys.exit(main())
