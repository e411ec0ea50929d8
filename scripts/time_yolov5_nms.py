"""Time ultralytics/yolov5's non_max_suppression on saved predictions; run from a yolov5 checkout with its Python.

    cd /tmp/yolov5 && /tmp/y5venv/bin/python /path/to/detect/scripts/time_yolov5_nms.py \
        --predictions /path/to/runs/bench/yolov5n_coco128_640_predictions.pt --out yolov5_nms.json

The predictions file is written by scripts/bench_nms.py, which also runs this script itself when given --yolov5.
This script imports nothing from detect (it runs in yolov5's environment) and times exactly as bench_nms.py times
ours: one warm-up call, then the median wall time of --repeats calls, divided by the batch size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

# validation's settings (conf 0.001, IoU 0.6, multi-label, 300 per image), as bench_nms.py uses them
CONF, IOU, MAX_DET = 0.001, 0.6, 300


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--predictions", required=True)
    parser.add_argument("--out", required=True, help="JSON file: ms per image by batch size")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("YOLO_OFFLINE", "1")  # the ultralytics package that yolov5's utils import: no network
    sys.path.insert(0, os.getcwd())  # the checkout
    from utils.general import LOGGER, non_max_suppression  # yolov5's, from the checkout

    # yolov5 stops NMS after 0.5 + 0.05 * batch seconds and returns what it has: count it, the time is then cut short
    stops = []
    LOGGER.addFilter(lambda record: stops.append(1) if "time limit" in record.getMessage() else 1)
    predictions = torch.load(args.predictions, weights_only=True)
    result = {}
    for size in args.batch_sizes:
        batch = predictions[:size]
        non_max_suppression(batch, CONF, IOU, multi_label=True, max_det=MAX_DET)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            non_max_suppression(batch, CONF, IOU, multi_label=True, max_det=MAX_DET)
            times.append(time.perf_counter() - start)
        result[size] = 1000 * statistics.median(times) / size
    with open(args.out, "w") as file:
        json.dump({"torch": torch.__version__, "ms_per_image": result, "time_limit_stops": len(stops)}, file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
