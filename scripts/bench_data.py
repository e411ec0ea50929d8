"""Loader throughput (images/s) for mosaic training batches, and per-stage CPU time per image.

Usage: python scripts/bench_data.py --data coco128 --batches 20 --batch-size 16
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Iterator

import numpy as np

from detect.config import load_hyp
from detect.data import (
    AugmentSettings,
    build_train_loader,
    load_data_config,
    load_split,
)
from detect.data.augment import transforms as augment
from detect.data.augment.mosaic import mosaic4
from detect.data.batch import collate
from detect.data.datasets import TrainDataset
from detect.data.images.letterbox import PAD_VALUE
from detect.data.images.load import load_resized


def loader_rate(data: str, hyp_name: str, imgsz: int, batch_size: int, workers: int, batches: int) -> float:
    """Images per second over `batches` batches after one warm-up batch (worker start-up excluded)."""
    augmentation = AugmentSettings.from_hyp(load_hyp(hyp_name))
    loader = build_train_loader(load_data_config(data), augmentation, imgsz, batch_size, workers, seed=0,
                                pin_memory=False)
    iterator = _endless(loader)
    next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch_size / (time.perf_counter() - start)


def _endless(loader) -> Iterator:
    """Batches over as many epochs as it takes (a small dataset has few batches per epoch)."""
    for epoch in itertools.count():
        loader.set_epoch(epoch)
        yield from loader


def stage_times(data: str, hyp_name: str, imgsz: int, count: int) -> dict[str, float]:
    """Milliseconds per training image for decode+resize, mosaic placement, warp, HSV+flip, collate (one process)."""
    settings = AugmentSettings.from_hyp(load_hyp(hyp_name))
    records = load_split(load_data_config(data), "train").records[:count]
    start = time.perf_counter()
    images = [load_resized(record.path, imgsz, augment=True) for record in records]
    decode = (time.perf_counter() - start) / len(records)
    dataset = TrainDataset(records, settings, imgsz, seed=0, cached=images)
    rng = np.random.default_rng(0)
    warp = (settings.degrees, settings.translate, settings.scale, settings.shear, settings.perspective)
    timings = {"mosaic": 0.0, "affine": 0.0, "hsv+flip": 0.0}
    for index in range(len(records)):
        indices = [index, *rng.integers(0, len(records), 3).tolist()]
        start = time.perf_counter()
        image, labels = mosaic4([dataset.load(position) for position in indices], imgsz, rng, *warp)
        mosaic_and_warp = time.perf_counter() - start
        canvas = np.full((2 * imgsz, 2 * imgsz, 3), PAD_VALUE, np.uint8)
        start = time.perf_counter()
        augment.random_warp(canvas, labels, rng, *warp, border=(-imgsz // 2, -imgsz // 2))
        timings["affine"] += time.perf_counter() - start
        timings["mosaic"] += mosaic_and_warp - (time.perf_counter() - start)
        start = time.perf_counter()
        image = augment.hsv_jitter(image, rng, settings.hsv_h, settings.hsv_s, settings.hsv_v)
        augment.flip(image, labels, horizontal=True)
        timings["hsv+flip"] += time.perf_counter() - start
    samples = [dataset[(0, index)] for index in range(len(records))]
    start = time.perf_counter()
    collate(samples)
    collate_time = (time.perf_counter() - start) / len(samples)
    result = {"decode": decode, **{name: value / len(records) for name, value in timings.items()}, "collate": collate_time}
    return {name: 1000 * value for name, value in result.items()}


def main(argv: list[str] | None = None) -> int:
    """Print the throughput table and the per-stage table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="coco128")
    parser.add_argument("--hyp", default="scratch-low.yaml")
    parser.add_argument("--sizes", type=int, nargs="+", default=[320, 640])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"| imgsz | {' | '.join(f'{w} workers img/s' for w in args.workers)} |")
    print(f"|---|{'---|' * len(args.workers)}")
    for imgsz in args.sizes:
        rates = [loader_rate(args.data, args.hyp, imgsz, args.batch_size, w, args.batches) for w in args.workers]
        print(f"| {imgsz} | {' | '.join(f'{rate:.1f}' for rate in rates)} |", flush=True)
    print()
    stages = {imgsz: stage_times(args.data, args.hyp, imgsz, args.batch_size * 2) for imgsz in args.sizes}
    names = list(next(iter(stages.values())))
    print(f"| imgsz | {' | '.join(f'{name} ms/img' for name in names)} |")
    print(f"|---|{'---|' * len(names)}")
    for imgsz, times in stages.items():
        print(f"| {imgsz} | {' | '.join(f'{times[name]:.2f}' for name in names)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
