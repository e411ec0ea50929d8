"""`python -m detect.tools.compare`: the same seeded batch through the same model in two settings (device A vs B,
fp32 vs AMP, or two checkpoints); per layer the output range and the max/mean absolute and relative difference,
the first layer past the tolerance flagged; then the losses and each layer's gradients.

    python -m detect.tools.compare --cfg yolov5s.yaml --device cpu                    # fp32 vs bf16 autocast
    python -m detect.tools.compare --weights best.pt --device npu:0                   # NPU fp32 vs NPU fp16 AMP
    python -m detect.tools.compare --weights best.pt --device cpu --device-b npu:0    # CPU fp32 vs NPU fp32
    python -m detect.tools.compare --weights a.pt --weights-b b.pt --device cpu       # two checkpoints
"""

from __future__ import annotations

import dataclasses

from detect import cli
from detect.config import IMAGE_SIZE, POSITIVE, UNIT, option
from detect.errors import UserError
from detect.tools.capture import Difference, capture, differences
from detect.tools.workload import (
    PRECISIONS,
    WorkloadSettings,
    build_tool_model,
    precision_name,
    select_backend,
    synthetic_batch,
)

HEADER = f"{'':<18} {'A min':>10} {'A max':>10} {'max|A-B|':>10} {'mean|A-B|':>10} {'rel max':>9} {'rel mean':>9}"


@dataclasses.dataclass(frozen=True)
class CompareSettings(WorkloadSettings):
    """The options of `python -m detect.tools.compare` (a small batch at 320 by default)."""

    imgsz: int = option(320, "image size, pixels", bound=IMAGE_SIZE)
    batch_size: int = option(2, bound=POSITIVE)
    weights_b: str | None = option(None, "B's checkpoint (default: the same model as A)")
    device: str = option("auto", "A's device")
    device_b: str | None = option(None, "B's device (default: A's)")
    precision: str = option("fp32", "A's precision", choices=PRECISIONS)
    precision_b: str | None = option(None, "B's precision (default: A's when --device-b or --weights-b is given, "
                                           "else amp: the device's AMP dtype)", choices=PRECISIONS)
    tolerance: float = option(0.05, "a layer drifts when mean|A-B| / mean|A| is past this", bound=UNIT)
    mode: str = option("train", "BatchNorm on batch statistics (train, as in training) or running ones (eval)",
                       choices=("train", "eval"))


parse_args = cli.settings_reader(CompareSettings, "python -m detect.tools.compare", __doc__)


def row(difference: Difference, flag: str = "") -> str:
    """One table row; `flag` marks the first drifting layer."""
    d = difference
    return (f"{d.name:<18} {d.low:>10.4g} {d.high:>10.4g} {d.max_abs:>10.3g} {d.mean_abs:>10.3g} "
            f"{d.max_rel:>9.3g} {d.mean_rel:>9.3g}{flag}")


def first_drift(rows: list[Difference], tolerance: float) -> Difference | None:
    """The first row past the tolerance, in the order given."""
    return next((d for d in rows if d.drifts(tolerance)), None)


def table(title: str, rows: list[Difference], first: Difference | None) -> str:
    lines = [title, HEADER] + [row(d, "  <- first past the tolerance" if d is first else "") for d in rows]
    return "\n".join(lines)


def report(outputs: list[Difference], losses: list[Difference], gradients: list[Difference], tolerance: float) -> str:
    """The three tables and a one-line summary of where B first leaves A."""
    first_output = first_drift(outputs, tolerance)
    first_gradient = first_drift(gradients[::-1], tolerance)  # gradients flow from the head back to the input
    where = [first.name if first else "none" for first in (first_output, first_gradient)]
    return "\n\n".join([table("layer outputs", outputs, first_output), table("losses", losses, None),
                        table("gradients", gradients, first_gradient),
                        f"first past {tolerance}: outputs {where[0]}; gradients (from the head) {where[1]}"])


def run(args: CompareSettings) -> str:
    # One thing changes unless told otherwise: the device, the checkpoint, or else the precision.
    precision_b = args.precision_b or (args.precision if args.device_b or args.weights_b else "amp")
    backend_a = select_backend(args.device, args.precision, args)
    backend_b = select_backend(args.device_b or args.device, precision_b, args)
    model_a = build_tool_model(args.cfg, args.weights, args.nc, args.seed)
    model_b = build_tool_model(args.cfg, args.weights_b, args.nc, args.seed) if args.weights_b else model_a
    if model_b.nc != model_a.nc or [p.shape for p in model_a.parameters()] != [p.shape for p in model_b.parameters()]:
        raise UserError(f"{args.weights} and {args.weights_b} hold different architectures: nothing to compare")
    batch = synthetic_batch(args.batch_size, args.imgsz, model_a.nc, args.seed)
    header = (f"A: {backend_a.device} {precision_name(backend_a)} {args.weights or args.cfg} | B: {backend_b.device} "
              f"{precision_name(backend_b)} {args.weights_b or args.weights or args.cfg} | {args.mode} mode, seeded "
              f"batch {args.batch_size} x {args.imgsz} px")
    a = capture(model_a, batch, backend_a, args.imgsz, train=args.mode == "train")
    b = capture(model_b, batch, backend_b, args.imgsz, train=args.mode == "train")
    return header + "\n\n" + report(*differences(a, b), args.tolerance)


main = cli.main_for(parse_args, lambda args: print(run(args)))


if __name__ == "__main__":
    cli.exit_process(main())
