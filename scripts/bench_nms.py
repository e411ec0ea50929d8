"""NMS latency on CPU for batches of 25,200 candidates x 80 classes (the yolov5 head at 640).

Run: python scripts/bench_nms.py [--batch-sizes 1 8 32] [--repeats 5]

Score distribution ("realistic"), fitted to the official yolov5n on 8 coco128 images at 640 (measured with
detect.models + ../shared/weights/yolov5n.pt): about 1,370 anchors per image have obj > 0.001 and about 2,300
(anchor, class) pairs pass conf 0.001 multi-label. Synthetic logits reproduce both counts: objectness logit
-11.2 + 2.7 z, class logit -5.8 + 1.6 (0.15 z + sqrt(1 - 0.15^2) e), z and e standard normal (class scores
slightly correlated with objectness, as in a trained head; the measured class logits were N(-5.8, 1.6)).
Boxes: centres uniform in 640x640, sides log-uniform 8-400 px.
"Worst case": every score in [0.5, 1], so all 2,016,000 pairs pass and the 30,000-candidate cap is hit.
Settings are validation's (YOLOV5-FACTS.md): conf 0.001, IoU 0.6, multi-label, max 300 detections.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch
import torchvision

from detect.ops.nms import non_max_suppression

ANCHORS = 25200  # 3 anchors x (80^2 + 40^2 + 20^2) cells at 640
CLASSES = 80


def make_batch(batch_size: int, worst_case: bool, generator: torch.Generator) -> torch.Tensor:
    """A decoded head output (B, 25200, 85) with the score distribution described in the module docstring."""
    shape = (batch_size, ANCHORS)
    centres = torch.rand(*shape, 2, generator=generator) * 640
    sides = torch.exp(math.log(8) + torch.rand(*shape, 2, generator=generator) * math.log(400 / 8))
    if worst_case:
        scores = 0.5 + 0.5 * torch.rand(*shape, 1 + CLASSES, generator=generator)
    else:
        shared = torch.randn(*shape, 1, generator=generator)
        objectness = torch.sigmoid(-11.2 + 2.7 * shared)
        noise = torch.randn(*shape, CLASSES, generator=generator)
        classes = torch.sigmoid(-5.8 + 1.6 * (0.15 * shared + math.sqrt(1 - 0.15**2) * noise))
        scores = torch.cat((objectness, classes), dim=2)
    return torch.cat((centres, sides, scores), dim=2)


def candidates_per_image(prediction: torch.Tensor, conf: float) -> float:
    """Mean number of (anchor, class) pairs passing the objectness and score filters."""
    passing = (prediction[..., 4:5] > conf) & (prediction[..., 5:] * prediction[..., 4:5] > conf)
    return passing.sum().item() / prediction.shape[0]


def time_call(prediction: torch.Tensor, repeats: int) -> list[float]:
    """Wall milliseconds of non_max_suppression at validation settings, after one warm-up call."""
    non_max_suppression(prediction, 0.001, 0.6, max_det=300, nms=torchvision.ops.nms)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        non_max_suppression(prediction, 0.001, 0.6, max_det=300, nms=torchvision.ops.nms)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--worst-case-batch-sizes", type=int, nargs="*", default=[1, 8],
                        help="batch sizes for the worst case (about 1.7 s per image)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    generator = torch.Generator().manual_seed(args.seed)
    load = os.getloadavg()[0]  # other work on the machine inflates the medians; min is the steadier figure
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU, torchvision.ops.nms kernel, "
          f"load average {load:.2f} on {os.cpu_count()} cores")
    columns = f"{'images':>6} | {'scores':<10} | {'candidates/img':>14} | {'median ms':>9} | {'ms/image':>8}"
    print(f"{columns} | {'min ms':>8}")
    print("-" * 72)
    for worst_case, batch_sizes in ((False, args.batch_sizes), (True, args.worst_case_batch_sizes)):
        for batch_size in batch_sizes:
            prediction = make_batch(batch_size, worst_case, generator)
            count = candidates_per_image(prediction, 0.001)
            times = time_call(prediction, args.repeats if not worst_case else 2)
            median = statistics.median(times)
            label = "worst case" if worst_case else "realistic"
            print(f"{batch_size:>6} | {label:<10} | {count:>14,.0f} | {median:>9.1f} | {median / batch_size:>8.2f} | "
                  f"{min(times):>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
