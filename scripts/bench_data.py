"""Loader throughput (images/s) for mosaic training batches, and a table of CPU time per image by stage.

Usage: python scripts/bench_data.py --data coco128 --batches 20 --batch-size 16
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Iterator

import numpy as np
import torch

from detect.backend.cpu import cpu_description
from detect.config import load_hyp
from detect.data import (
    AugmentSettings,
    TrainLoaderSettings,
    build_train_loader,
    load_data_config,
    load_split,
)
from detect.data.augment import transforms as augment
from detect.data.augment.mosaic import mosaic4
from detect.data.batch import Sample, collate
from detect.data.datasets import TrainDataset, to_network_layout
from detect.data.images.letterbox import PAD_VALUE
from detect.data.images.load import read_image, resize_to_imgsz
from detect.ops.boxes import xyxy_to_xywhn


def loader_rate(data: str, hyp_name: str, imgsz: int, batch_size: int, workers: int, batches: int) -> float:
    """Images per second over `batches` batches after one warm-up batch (worker start-up excluded)."""
    augmentation = AugmentSettings.from_hyp(load_hyp(hyp_name))
    loader = build_train_loader(load_split(load_data_config(data), "train"),
                                TrainLoaderSettings(augmentation, imgsz, batch_size, workers, seed=0, pin_memory=False))
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


class _Prepared(torch.utils.data.Dataset):
    """Samples made beforehand, so that a loader over them costs only collate and the hand-off to the main process."""

    def __init__(self, samples: list) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        return self.samples[index]


def stage_times(data: str, hyp_name: str, imgsz: int, batch_size: int, batches: int = 4) -> dict[str, float]:
    """CPU milliseconds per output image of each stage of a mosaic training sample (one process, the dataset's own
    functions in its order; decode and resize are per source image, a mosaic takes four), then collate and the
    hand-off of the batch from a worker to the main process."""
    settings = AugmentSettings.from_hyp(load_hyp(hyp_name))
    records = load_split(load_data_config(data), "train").records[:batch_size * batches]
    timings = dict.fromkeys(["decode", "resize", "mosaic", "affine", "hsv", "flip", "labels", "layout"], 0.0)

    def timed(name: str, function, *args):
        start = time.perf_counter()
        result = function(*args)
        timings[name] += time.perf_counter() - start
        return result

    originals = [timed("decode", read_image, record.path) for record in records]
    images = [timed("resize", resize_to_imgsz, original, imgsz, True) for original in originals]
    dataset = TrainDataset(records, settings, imgsz, seed=0, cached=images)
    rng = np.random.default_rng(0)
    samples = []
    for index in range(len(records)):
        pieces = [dataset.load(position) for position in [index, *rng.integers(0, len(records), 3).tolist()]]
        image, labels = timed("mosaic", mosaic4, pieces, imgsz, rng, settings.warp)  # placement and warp
        canvas = np.full((2 * imgsz, 2 * imgsz, 3), PAD_VALUE, np.uint8)
        timed("affine", augment.random_warp, canvas, labels, rng, settings.warp, (-imgsz // 2, -imgsz // 2))
        image = timed("hsv", augment.hsv_jitter, image, rng, settings.hsv_h, settings.hsv_s, settings.hsv_v)
        if rng.random() < settings.fliplr:
            image, labels = timed("flip", augment.flip, image, labels, True)
        start = time.perf_counter()
        labels = augment.degenerate_free(labels)
        normalised = np.concatenate([labels[:, :1], xyxy_to_xywhn(labels[:, 1:], imgsz, imgsz)], axis=1)
        timings["labels"] += time.perf_counter() - start
        samples.append(Sample(timed("layout", to_network_layout, image), normalised, "", index))
    timings["mosaic"] -= timings["affine"]  # mosaic4 warps its canvas too: placement alone
    loader = torch.utils.data.DataLoader(_Prepared(samples), batch_size=batch_size, num_workers=1,
                                         collate_fn=collate)
    iterator = iter(loader)
    next(iterator)  # the worker's start-up
    start = time.perf_counter()
    for _ in iterator:
        pass
    handoff = (time.perf_counter() - start) / (len(samples) - batch_size)
    result = {name: 1000 * value / len(records) for name, value in timings.items()}
    result["collate + hand-off"] = 1000 * handoff
    result["per output image"] = 4 * (result["decode"] + result["resize"]) + sum(
        value for name, value in result.items() if name not in ("decode", "resize"))
    return result


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
    print(cpu_description())  # what the figures were measured on (docs/benchmarks.md)
    print(f"| imgsz | {' | '.join(f'{w} workers img/s' for w in args.workers)} |")
    print(f"|---|{'---|' * len(args.workers)}")
    for imgsz in args.sizes:
        rates = [loader_rate(args.data, args.hyp, imgsz, args.batch_size, w, args.batches) for w in args.workers]
        print(f"| {imgsz} | {' | '.join(f'{rate:.1f}' for rate in rates)} |", flush=True)
    print()
    stages = {imgsz: stage_times(args.data, args.hyp, imgsz, args.batch_size) for imgsz in args.sizes}
    print(f"| stage, CPU ms per image | {' | '.join(str(imgsz) for imgsz in args.sizes)} |")
    print(f"|---|{'---|' * len(args.sizes)}")
    for name in next(iter(stages.values())):
        print(f"| {name} | {' | '.join(f'{stages[imgsz][name]:.2f}' for imgsz in args.sizes)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
