"""Wall time of `detect.val` on coco128 at 640 (official yolov5n weights), for a few loader worker counts.

    python scripts/bench_val.py [--workers 0 2] [--weights weights/yolov5n.pt]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time

from detect import val
from detect.backend.cpu import cpu_description


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default="weights/yolov5n.pt")
    parser.add_argument("--data", default="coco128.yaml")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    args = parser.parse_args()
    print(cpu_description())  # what the figures were measured on (docs/benchmarks.md)
    logging.basicConfig(level=logging.WARNING)
    print(f"{'workers':>8}{'wall s':>9}{'img/s':>8}{'pre ms':>8}{'infer ms':>10}{'NMS ms':>8}{'mAP50-95':>10}")
    for workers in args.workers:
        with tempfile.TemporaryDirectory() as project:
            options = val.parse_args(["--weights", args.weights, "--data", args.data, "--imgsz", str(args.imgsz),
                                      "--batch-size", str(args.batch_size), "--workers", str(workers),
                                      "--device", "cpu", "--project", project, "--no-progress"])
            start = time.perf_counter()
            result = val.validate(options)
            wall = time.perf_counter() - start
        speed = result.speed
        print(f"{workers:>8}{wall:>9.1f}{result.images / wall:>8.1f}{speed.preprocess:>8.1f}"
              f"{speed.inference:>10.1f}{speed.nms:>8.1f}{result.metrics.map50_95:>10.4f}")


if __name__ == "__main__":
    main()
