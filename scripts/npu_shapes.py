"""Count the distinct input shapes an Ascend NPU meets in one epoch of training and its validation: each is a graph a
910B compiles (or selects kernels for) once (docs/torch-npu.md, "Shapes per epoch").

    python scripts/npu_shapes.py --data coco128.yaml --cfg yolov5s.yaml --imgsz 640 --batch-size 16 --device npu:0

Trains one epoch at a fixed size, then one with --multi-scale, each validated with rectangular batches (the last one
partial), and prints per run the distinct shapes of the model's training input, the loss's padded targets, the
validation input and the NMS kernel's candidate bucket, with the bound each keeps to. --dry-run runs the NPU
backend's code on the host without torch_npu (detect/backend/npu_ops/dry_run.py): the shapes are our code's, the same
on a card; the tests run it on the NPU stand-in (tests/scripts/test_npu_shapes.py).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import math
import sys
import tempfile
from collections.abc import Iterator

import torch

from detect import train
from detect.backend.npu import NMS_BUCKET, NpuBackend
from detect.data.device_batch import multi_scale_sizes
from detect.models import DetectionModel
from detect.training.loss import DetectionLoss

PHASES = ("train forward", "loss targets", "validation forward", "NMS buckets")
MAX_CANDIDATES = 30000  # per image into NMS (detect/ops/nms.py, non_max_suppression)


@contextlib.contextmanager
def counted_shapes() -> Iterator[dict[str, collections.Counter]]:
    """Count, while open, the shape each phase's graph is given: the model's training input (forward), its inference
    input (predict: validation, the final evaluation, the AMP check), the loss's padded targets, and the candidate
    bucket NpuBackend.nms hands npu_nms_v4. (The model's build runs on the host and is not counted.)"""
    shapes = {phase: collections.Counter() for phase in PHASES}
    forward, predict, loss_forward, nms = (DetectionModel.forward, DetectionModel.predict, DetectionLoss.forward,
                                           NpuBackend.nms)

    def counted_forward(model, images, **options):  # options: with_head_inputs, asked when a teacher teaches
        shapes["train forward"][tuple(images.shape)] += 1
        return forward(model, images, **options)

    def counted_predict(model, images):
        shapes["validation forward"][tuple(images.shape)] += 1
        return predict(model, images)

    def counted_loss(loss, raw, padded_targets):
        shapes["loss targets"][tuple(padded_targets.shape)] += 1
        return loss_forward(loss, raw, padded_targets)

    def counted_nms(backend, boxes, scores, iou_threshold):
        if len(boxes):  # an empty batch launches nothing
            shapes["NMS buckets"][(math.ceil(len(boxes) / NMS_BUCKET) * NMS_BUCKET, 4)] += 1
        return nms(backend, boxes, scores, iou_threshold)

    patched = {"forward": counted_forward, "predict": counted_predict}
    originals = {"forward": forward, "predict": predict}
    for name, function in patched.items():
        setattr(DetectionModel, name, function)
    DetectionLoss.forward, NpuBackend.nms = counted_loss, counted_nms
    try:
        yield shapes
    finally:
        for name, function in originals.items():
            setattr(DetectionModel, name, function)
        DetectionLoss.forward, NpuBackend.nms = loss_forward, nms


def bounds(imgsz: int, batch_size: int, multi_scale: bool) -> dict[str, str]:
    """The most shapes each phase can take in an epoch, and why."""
    sizes = multi_scale_sizes(imgsz) if multi_scale else (imgsz,)
    return {
        "train forward": f"{len(sizes)}: drop_last, {'sizes ' + ', '.join(map(str, sizes)) if multi_scale else 'one size'}",
        "loss targets": "1 + one per 128 labels beyond 128 in one image (rows padded to multiples of 128)",
        "validation forward": "one per rectangular batch of the val set, the partial last one included, + the AMP "
                              "check's",
        "NMS buckets": f"{math.ceil(2 * batch_size * MAX_CANDIDATES / NMS_BUCKET)}: multiples of {NMS_BUCKET} up to "
                       f"{MAX_CANDIDATES} candidates x the validation batch ({2 * batch_size})",
    }


def one_run(options: dict, multi_scale: bool) -> dict[str, collections.Counter]:
    """The shapes of one epoch (and its validation and final evaluation) with these train options."""
    with tempfile.TemporaryDirectory() as project, counted_shapes() as shapes:
        train.run(**options, epochs=1, multi_scale=multi_scale, project=project, name="shapes", noplots=True,
                  progress=False)
    return shapes


def report(label: str, shapes: dict[str, collections.Counter], limits: dict[str, str]) -> list[str]:
    lines = [f"{label}:"]
    for phase in PHASES:
        found = ", ".join(f"{shape} x{count}" for shape, count in sorted(shapes[phase].items()))
        lines.append(f"  {phase:<19} {len(shapes[phase]):>3} shapes ({found}); at most {limits[phase]}")
    return lines


@contextlib.contextmanager
def backend_on_the_host() -> Iterator[None]:
    """--device npu:N gives the NPU backend run dry on the host (no torch_npu needed)."""
    from detect.backend.npu_ops.dry_run import host_torch_npu

    original = NpuBackend.__init__

    def on_the_host(self, index: int = 0, **options) -> None:
        original(self, index, **{**options, "device": torch.device("cpu"), "torch_npu": host_torch_npu()})

    NpuBackend.__init__ = on_the_host
    try:
        yield
    finally:
        NpuBackend.__init__ = original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="coco128.yaml")
    parser.add_argument("--cfg", default="yolov5s.yaml")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default="npu:0")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--dry-run", action="store_true", help="the NPU backend on the host, no torch_npu")
    parser.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None,
                        help="the trainer's --amp (the shapes are the same; fp16 on a host CPU is slow)")
    args = parser.parse_args(argv)
    options = {"data": args.data, "cfg": args.cfg, "imgsz": args.imgsz, "batch_size": args.batch_size,
               "device": args.device, "workers": args.workers, "amp": args.amp}
    for label, multi_scale in (("fixed size", False), ("--multi-scale", True)):
        with backend_on_the_host() if args.dry_run else contextlib.nullcontext():
            shapes = one_run(options, multi_scale)
        print("\n".join(report(f"{label} ({args.cfg}, {args.imgsz} px, batch {args.batch_size})", shapes,
                               bounds(args.imgsz, args.batch_size, multi_scale))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
