"""NMS milliseconds per image on real yolov5n predictions, ours and (optionally) ultralytics/yolov5's, alternating.

    python scripts/bench_nms.py                                   # ours only
    python scripts/bench_nms.py --yolov5 /tmp/yolov5 --yolov5-python /tmp/y5venv/bin/python   # side by side

The predictions are the official yolov5n's decoded outputs (B, 25200, 85) for the first 32 coco128 images,
letterboxed to 640x640, made once with our inference path and saved (--predictions); yolov5's function gets the
same file through scripts/time_yolov5_nms.py, run by the yolov5 checkout's own Python (yolov5 is not a dependency).
Settings are validation's (docs/yolov5.md, "NMS"): conf 0.001, IoU 0.6, multi-label, max 300 detections per image.
Each round times every batch size on both sides; the table gives the median over rounds of each round's median.
"Worst case" (synthetic, --worst-case): every score in [0.5, 1], so all 2,016,000 pairs pass and the 30,000 cap is hit.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from detect import backend as backends
from detect.backend.cpu import cpu_description
from detect.data import ValLoaderSettings, build_val_loader, load_data_config, load_split
from detect.data.device_batch import to_device_batch
from detect.inference.model import load_inference_model
from detect.ops.nms import non_max_suppression

TIMER = Path(__file__).with_name("time_yolov5_nms.py")
SETTINGS = {"conf_threshold": 0.001, "iou_threshold": 0.6, "max_det": 300}


def make_predictions(weights: str, data: str, images: int) -> torch.Tensor:
    """Decoded (images, 25200, 85) predictions of `weights` for the first images of the split, square 640 inputs."""
    backend = backends.select("cpu", amp=False)
    model = load_inference_model(weights, backend)
    loader = build_val_loader(load_split(load_data_config(data), "val"),
                              ValLoaderSettings(640, images, 0, model.stride, rect=False, pin_memory=False))
    return model(to_device_batch(next(iter(loader)), backend).images)


def worst_case(batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """(B, 25200, 85): centres in 640x640, sides log-uniform 8-400 px, every score in [0.5, 1]."""
    shape = (batch_size, 25200)
    centres = torch.rand(*shape, 2, generator=generator) * 640
    sides = torch.exp(math.log(8) + torch.rand(*shape, 2, generator=generator) * math.log(400 / 8))
    return torch.cat((centres, sides, 0.5 + 0.5 * torch.rand(*shape, 81, generator=generator)), dim=2)


def time_ours(prediction: torch.Tensor, repeats: int) -> float:
    """Median wall ms per image of our NMS over `repeats` calls, after one warm-up call."""
    backend = backends.select("cpu", amp=False)

    def call() -> None:
        non_max_suppression(prediction, SETTINGS["conf_threshold"], SETTINGS["iou_threshold"],
                            max_det=SETTINGS["max_det"], **backend.nms_arguments())

    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times) / len(prediction)


def time_yolov5(checkout: str, python: str, predictions: Path, batch_sizes: list[int], repeats: int,
                threads: int | None) -> dict:
    """{batch size: ms per image} of yolov5's non_max_suppression, timed by time_yolov5_nms.py in the checkout."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "yolov5_nms.json"
        subprocess.run([python, str(TIMER), "--predictions", str(predictions), "--out", str(out), "--repeats",
                        str(repeats), "--batch-sizes", *map(str, batch_sizes),
                        *(["--threads", str(threads)] if threads else [])], cwd=checkout, check=True)
        result = json.loads(out.read_text())
    if result["time_limit_stops"]:
        print(f"yolov5 stopped NMS at its time limit {result['time_limit_stops']} times: its times are cut short")
    return {int(size): value for size, value in result["ms_per_image"].items()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default="weights/yolov5n.pt")
    parser.add_argument("--data", default="coco128.yaml")
    parser.add_argument("--predictions", type=Path, default=Path("runs/bench/yolov5n_coco128_640_predictions.pt"),
                        help="saved predictions: made on first use, then read (both sides time the same file)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per batch size and round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (ours, yolov5's, ours, ...)")
    parser.add_argument("--threads", type=int, help="torch threads on both sides (default: torch's, the cores)")
    parser.add_argument("--yolov5", help="a yolov5 checkout: also time its non_max_suppression on the same file")
    parser.add_argument("--yolov5-python", default=sys.executable, help="the Python that runs the yolov5 checkout")
    parser.add_argument("--worst-case", type=int, nargs="*", default=[], metavar="BATCH",
                        help="also time the synthetic worst case at these batch sizes (about 1.2 s per image)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(cpu_description())  # what the figures were measured on (docs/benchmarks.md)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.predictions.exists():
        args.predictions.parent.mkdir(parents=True, exist_ok=True)
        torch.save(make_predictions(args.weights, args.data, max(args.batch_sizes)), args.predictions)
    predictions = torch.load(args.predictions, weights_only=True)
    ours: dict[int, list[float]] = {size: [] for size in args.batch_sizes}
    theirs: dict[int, list[float]] = {size: [] for size in args.batch_sizes}
    for _ in range(args.rounds):
        for size in args.batch_sizes:
            ours[size].append(time_ours(predictions[:size], args.repeats))
        if args.yolov5:
            for size, value in time_yolov5(args.yolov5, args.yolov5_python, args.predictions.resolve(),
                                           args.batch_sizes, args.repeats, args.threads).items():
                theirs[size].append(value)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} cores; {args.rounds} rounds x {args.repeats} calls; ms per image, median of rounds")
    print(f"{'images':>6} | {'ours':>8} | {'yolov5':>8} | {'ratio':>6} | ours by round")
    for size in args.batch_sizes:
        mine = statistics.median(ours[size])
        other = statistics.median(theirs[size]) if theirs[size] else math.nan
        rounds = " ".join(f"{value:.2f}" for value in ours[size])
        print(f"{size:>6} | {mine:>8.2f} | {other:>8.2f} | {mine / other:>6.2f} | {rounds}")
    generator = torch.Generator().manual_seed(0)
    for size in args.worst_case:
        print(f"worst case, {size} images: {time_ours(worst_case(size, generator), 2):.0f} ms per image")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
