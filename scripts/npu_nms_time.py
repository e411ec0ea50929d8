"""NMS milliseconds per validation batch on the NPU against the host, on a model's real predictions: NpuBackend's NMS
(candidates found on the device, one npu_nms_v4 call per batch on 1024-padded buckets) against the batch's decoded
outputs copied to the host and suppressed there with torchvision's kernel (what ultralytics' fix for #25954 does).

    python scripts/npu_nms_time.py --weights weights/yolov5s.pt --data coco128.yaml --imgsz 640 --batch-size 32 \\
        --device npu:0

Settings are validation's (conf 0.001, IoU 0.6, multi-label, 300 per image: docs/yolov5.md, "NMS"). Each side runs
--repeats times over the first --batches batches, alternating, the device synchronised around each call; the median
per batch is printed. On the NPU stand-in (tests/scripts/test_npu_check.py) it runs, but its times mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from detect import backend as backends
from detect.data import ValLoaderSettings
from detect.data.device_batch import to_device_batch
from detect.evaluation.scoring import ScoredSplit, prepare_scoring
from detect.ops.nms import non_max_suppression

SETTINGS = {"conf_threshold": 0.001, "iou_threshold": 0.6, "max_det": 300}


def timed(backend: backends.Backend, run) -> tuple[float, object]:
    """(milliseconds, result) of run(), the device synchronised before and after."""
    backend.synchronize()
    started = time.perf_counter()
    result = run()
    backend.synchronize()
    return 1000 * (time.perf_counter() - started), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default="weights/yolov5s.pt")
    parser.add_argument("--data", default="coco128.yaml")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="npu:0")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batches", type=int, default=4, help="batches of the val split to time")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per batch and side")
    args = parser.parse_args(argv)
    device, host = backends.select(args.device), backends.select("cpu")
    device.set_device()
    predictor, loader = prepare_scoring(args.weights, ScoredSplit(args.data), device,
                                        ValLoaderSettings(args.imgsz, args.batch_size, args.workers))
    outputs = []
    with torch.no_grad():
        for index, batch in enumerate(loader):
            if index == args.batches:
                break
            outputs.append(predictor.predict(to_device_batch(batch, device).images).float())
    times: dict[str, list[float]] = {"device": [], "host": []}
    kept = {}
    for _ in range(args.repeats):
        for output in outputs:
            milliseconds, found = timed(device, lambda out=output: non_max_suppression(
                out, **SETTINGS, **device.nms_arguments()))
            times["device"].append(milliseconds)
            kept["device"] = sum(len(rows) for rows in found)
            milliseconds, found = timed(device, lambda out=output: non_max_suppression(
                out.cpu(), **SETTINGS, **host.nms_arguments()))
            times["host"].append(milliseconds)
            kept["host"] = sum(len(rows) for rows in found)
    sizes = ", ".join(str(len(output)) for output in outputs)
    print(f"NMS per batch ({args.weights}, {args.imgsz} px, batches of {sizes}, {args.repeats} repeats, median): "
          f"{device.device} {statistics.median(times['device']):.2f} ms, host (copy + torchvision, "
          f"{torch.get_num_threads()} threads) {statistics.median(times['host']):.2f} ms; "
          f"detections of the last batch: {kept['device']} and {kept['host']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
