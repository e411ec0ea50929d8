"""The floor of distillation's cost (docs/benchmarks.md, "Distillation"): the teacher's forward alone (eval mode,
BatchNorms folded, no gradients, as training runs it) as a share of the student's training step (forward in train mode
and backward of the outputs' mean; no loss, no optimizer), on random images, alternating for --rounds rounds in one
process after a warm-up of each; the share is the median of the rounds' ratios (a load that comes and goes moves a
round's pair together). A step with a teacher costs about 1 + that share: less where yolov5's loss (left out here)
takes a large part of the step, more with the term and the projectors (training's own cost line times all of it).

    python scripts/bench_teacher_share.py --student yolov5n.yaml --teacher yolov5n.yaml yolov5s.yaml --imgsz 256
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from detect.backend.cpu import cpu_description
from detect.models.yolo import DetectionModel, build_model


def step_seconds(student: DetectionModel, images: torch.Tensor) -> float:
    started = time.perf_counter()
    sum(output.float().mean() for output in student(images)).backward()
    seconds = time.perf_counter() - started
    student.zero_grad(set_to_none=True)
    return seconds


def forward_seconds(teacher: DetectionModel, images: torch.Tensor) -> float:
    started = time.perf_counter()
    with torch.no_grad():
        teacher(images)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--student", default="yolov5n.yaml")
    parser.add_argument("--teacher", nargs="+", default=["yolov5n.yaml", "yolov5s.yaml"])
    parser.add_argument("--imgsz", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{cpu_description()}; {torch.get_num_threads()} threads")
    images = torch.randn(args.batch_size, 3, args.imgsz, args.imgsz, generator=torch.Generator().manual_seed(0))
    student = build_model(args.student, 80).train()
    for cfg in args.teacher:
        teacher = build_model(cfg, 80).eval().fuse().requires_grad_(False)
        step_seconds(student, images)  # warm-up
        forward_seconds(teacher, images)
        rounds = [(step_seconds(student, images), forward_seconds(teacher, images)) for _ in range(args.rounds)]
        step, forward = (statistics.median(column) for column in zip(*rounds, strict=True))
        shares = sorted(taught / alone for alone, taught in rounds)  # each round's pair ran back to back
        share = statistics.median(shares)
        print(f"student {args.student} step {step:.3f} s, teacher {cfg} forward {forward:.3f} s at {args.imgsz}, "
              f"batch {args.batch_size}: the forward is {share:.2f} of the step (median of the rounds, "
              f"{shares[0]:.2f}-{shares[-1]:.2f}): a step with this teacher takes about {1 + share:.2f}x its time")


if __name__ == "__main__":
    main()
