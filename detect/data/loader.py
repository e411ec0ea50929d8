"""build_train_loader / build_val_loader: Loaders (sampling.py) with seeded (distributed) batch orders and fixed batch
shapes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from torch.utils.data import DataLoader, DistributedSampler

from detect.data.augment.settings import AugmentSettings
from detect.data.data_config import DataConfig
from detect.data.datasets import RectTrainDataset, TrainDataset, ValDataset
from detect.data.images.cache import build_image_cache
from detect.data.images.ram_cache import NodeShare
from detect.data.labels.check import DEFAULT_BOUNDS, ImageBounds
from detect.data.labels.split import LabelledSplit, load_split
from detect.data.remote.fetch_ahead import FetchAhead
from detect.data.sampling import (
    EpochBatchSampler,
    Loader,
    RectBatches,
    ShuffledBatches,
    ShuffleSampler,
    ValShard,
    loader_options,
)
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)


def default_workers(world_size: int = 1) -> int:
    """CPU workers per rank: the cores shared between ranks, at most 8."""
    return max(0, min(8, (os.cpu_count() or 1) // max(world_size, 1)))


def val_input_size(imgsz: int, stride: int, fixed_shape: tuple[int, int] | None = None) -> int:
    """The square side validation letterboxes to: imgsz rounded up to the model's stride (as yolov5's val.py, with a
    warning: a P7 model's is 128), or a static export's own side (it takes nothing else)."""
    if fixed_shape is None:
        side = -(-imgsz // stride) * stride
        if side != imgsz:
            LOGGER.warning("--imgsz %d is not a multiple of the model's stride %d: evaluating at %d", imgsz, stride,
                           side)
        return side
    height, width = fixed_shape
    if height != width:
        raise UserError(f"this export takes {height}x{width} inputs; validation letterboxes to squares: "
                        f"export it square or with --dynamic")
    if height != imgsz:
        LOGGER.info("the export is static at %dx%d: evaluating at that size, not --imgsz %d", height, width, imgsz)
    return height


def build_train_loader(data_config: DataConfig, augmentation: AugmentSettings, imgsz: int, batch_size: int,
                       workers: int, seed: int, rank: int = 0, world_size: int = 1, cache: str | None = None,
                       pin_memory: bool = True, prefetch_factor: int = 2, split: str = "train",
                       single_class: bool = False, rect: bool = False, stride: int = 32,
                       cache_dir: str | Path | None = None, checked: LabelledSplit | None = None,
                       share: NodeShare | None = None) -> Loader:
    """Augmented imgsz x imgsz batches of batch_size per rank, drop_last (one shape), reshuffled by set_epoch;
    with `rect`, aspect-ratio batches of one shape each (RectTrainDataset, RectBatchSampler). `checked`: the split
    as load_split gave it (else checked here); `cache_dir` and `share`: where caches go (build_image_cache)."""
    labelled = checked or load_split(data_config, split, single_class, cache_dir)
    cached = build_image_cache(labelled.records, imgsz, cache, cache_dir, share)
    options = loader_options(workers, pin_memory, prefetch_factor)
    if rect:
        dataset = RectTrainDataset(labelled.records, augmentation, imgsz, seed, batch_size, stride, cached)
        batches = RectBatches(len(dataset), batch_size, seed, rank, world_size)
        if len(batches) == 0:
            raise UserError(f"{data_config.source}: {len(dataset)} training images make fewer batches than ranks")
    else:
        dataset = TrainDataset(labelled.records, augmentation, imgsz, seed, cached)
        if world_size > 1:
            base = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed,
                                      drop_last=True)
        else:
            base = ShuffleSampler(len(dataset), seed)
        if len(base) < batch_size:
            raise UserError(f"{data_config.source}: {len(base)} training images per rank, fewer than batch size "
                            f"{batch_size}")
        batches = ShuffledBatches(base, batch_size)
    sampler = EpochBatchSampler(batches)
    if data_config.remote is not None:
        dataset = FetchAhead(dataset, batches.of_epoch)
    return Loader(DataLoader(dataset, batch_sampler=sampler, **options), labelled, dataset, sampler)


def build_val_loader(data_config: DataConfig, split: str = "val", imgsz: int = 640, batch_size: int = 32,
                     workers: int | None = None, stride: int = 32, rect: bool = True, pin_memory: bool = True,
                     prefetch_factor: int = 2, single_class: bool = False, rank: int = 0,
                     world_size: int = 1, cache_dir: str | Path | None = None,
                     checked: LabelledSplit | None = None, bounds: ImageBounds = DEFAULT_BOUNDS,
                     fixed_shape: tuple[int, int] | None = None) -> Loader:
    """Letterboxed rectangular batches of the whole split in aspect order; with `world_size` ranks, this rank's
    whole batches of them (sampling.ValShard). The side is `imgsz` rounded up to `stride`, or a static export's
    `fixed_shape` (square batches then). `checked`: the split as load_split gave it (else checked here, its label
    cache in `cache_dir` when given, images beyond `bounds` skipped)."""
    imgsz, rect = val_input_size(imgsz, stride, fixed_shape), rect and fixed_shape is None
    labelled = checked or load_split(data_config, split, single_class, cache_dir, bounds)
    dataset = ValDataset(labelled.records, imgsz, batch_size, stride, rect=rect)
    workers = default_workers() if workers is None else workers
    shard = ValShard(len(dataset), batch_size, rank, world_size)
    batching = {"batch_size": batch_size, "shuffle": False} if world_size == 1 else {"batch_sampler": shard}
    if data_config.remote is not None:
        dataset = FetchAhead(dataset, lambda _epoch: shard.batches)
    loader = DataLoader(dataset, **batching, **loader_options(workers, pin_memory, prefetch_factor))
    return Loader(loader, labelled, dataset)
