"""build_train_loader / build_val_loader: the Loaders (sampling.py) of a checked split (labels/split.py, load_split),
with seeded (distributed) batch orders and fixed batch shapes, as their settings say."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from torch.utils.data import DataLoader, DistributedSampler

from detect.data.augment.settings import AugmentSettings
from detect.data.datasets import ImageStore, RectTrainDataset, TrainDataset, ValDataset
from detect.data.images.cache import build_image_cache
from detect.data.images.ram_cache import NodeShare
from detect.data.labels.split import LabelledSplit
from detect.data.sampling import (
    EpochBatchSampler,
    Loader,
    RectBatches,
    ShuffledBatches,
    ShuffleSampler,
    ValShard,
    loader_options,
)
from detect.data.tiles.images import WindowImages
from detect.data.tiles.windows import TileSettings, expand_windows, log_windows
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


@dataclasses.dataclass(frozen=True)
class TrainLoaderSettings:
    """How a rank's training loader makes its batches: augmented imgsz x imgsz images, `batch_size` a rank, `workers`
    processes; seeded orders (reshuffled by set_epoch); `cache` (ram, disk or None) in `cache_dir`; with `rect`,
    aspect-ratio batches of one shape each, sides multiples of `stride`; with `tiles`, the windows of each image
    (data/tiles/), not the images, are the samples."""

    augmentation: AugmentSettings
    imgsz: int
    batch_size: int
    workers: int
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    cache: str | None = None
    pin_memory: bool = True
    prefetch_factor: int = 2
    rect: bool = False
    stride: int = 32
    cache_dir: str | Path | None = None
    tiles: TileSettings | None = None


@dataclasses.dataclass(frozen=True)
class ValLoaderSettings:
    """How a rank's validation loader makes its batches: letterboxed rectangular batches of `batch_size` in aspect
    order (square ones without `rect`), sides `imgsz` rounded up to `stride` or a static export's `fixed_shape`;
    with `world_size` ranks, this rank's whole batches (sampling.ValShard); `workers` processes (None: by cores);
    with `windows`, each image as decoded, alone in its batch, for sliced inference over those windows."""

    imgsz: int | None = 640  # None: the size the scored model records (evaluation/scoring.py fills it in)
    batch_size: int = 32
    workers: int | None = None
    stride: int = 32
    rect: bool = True
    pin_memory: bool = True
    prefetch_factor: int = 2
    rank: int = 0
    world_size: int = 1
    fixed_shape: tuple[int, int] | None = None
    windows: TileSettings | None = None  # sliced inference: images at full resolution, one a batch (ValDataset)


def build_train_loader(split: LabelledSplit, settings: TrainLoaderSettings, share: NodeShare | None = None) -> Loader:
    """The training loader of a checked split (load_split): drop_last (one shape a batch); `share`: the node's ranks
    that fill one --cache ram buffer (build_image_cache). With tiles, the loader's split holds the windows' records."""
    split, cached = _training_images(split, settings, share)
    options = loader_options(settings.workers, settings.pin_memory, settings.prefetch_factor)
    if settings.rect:
        dataset = RectTrainDataset(split.records, settings.augmentation, settings.imgsz, settings.seed,
                                   settings.batch_size, settings.stride, cached, split.storage)
        batches = RectBatches(len(dataset), settings.batch_size, settings.seed, settings.rank, settings.world_size)
        if len(batches) == 0:
            raise UserError(f"{split.source}: {len(dataset)} training images make fewer batches than ranks")
    else:
        dataset = TrainDataset(split.records, settings.augmentation, settings.imgsz, settings.seed, cached,
                               split.storage)
        batches = ShuffledBatches(_shuffled(len(dataset), settings, split), settings.batch_size)
    sampler = EpochBatchSampler(batches)
    dataset = split.storage.loader_dataset(dataset, batches.of_epoch)
    return Loader(DataLoader(dataset, batch_sampler=sampler, **options), split, dataset, sampler)


def _training_images(split: LabelledSplit, settings: TrainLoaderSettings,
                     share: NodeShare | None) -> tuple[LabelledSplit, ImageStore | None]:
    """The split as training samples it (its images, or with tiles its windows) and where their pixels come from:
    --cache's store of the images resized (tiles: at full resolution, each window cropped from its image)."""
    if settings.tiles is None:
        return split, build_image_cache(split.records, settings.imgsz, settings.cache, settings.cache_dir, share,
                                        split.storage)
    windows = expand_windows(split.records, settings.tiles, settings.seed)
    log_windows(windows, settings.tiles)
    if not len(windows.records):
        raise UserError(f"{split.source}: no window of the training images holds a box (--tile {settings.tiles.size})")
    if settings.cache is None:  # 0.69 s a window decoded, 2.9 ms from RAM (docs/benchmarks.md, "Tiles and slices")
        LOGGER.warning("--tile without --cache decodes a whole image for every window it reads: --cache ram or disk "
                       "keeps the images at full resolution and crops windows from them")
    images = build_image_cache(windows.images, None, settings.cache, settings.cache_dir, share, split.storage)
    return (dataclasses.replace(split, records=windows.records),
            WindowImages.of(windows, settings.imgsz, images, split.storage))


def _shuffled(count: int, settings: TrainLoaderSettings, split: LabelledSplit) -> ShuffleSampler | DistributedSampler:
    """The seeded order of `count` samples (this rank's share of it, drop_last); fewer than a batch is a UserError."""
    if settings.world_size > 1:
        order = DistributedSampler(range(count), num_replicas=settings.world_size, rank=settings.rank, shuffle=True,
                                   seed=settings.seed, drop_last=True)
    else:
        order = ShuffleSampler(count, settings.seed)
    if len(order) < settings.batch_size:
        raise UserError(f"{split.source}: {len(order)} training images per rank, fewer than batch size "
                        f"{settings.batch_size}")
    return order


def build_val_loader(split: LabelledSplit, settings: ValLoaderSettings) -> Loader:
    """The validation loader of a checked split (load_split), this rank's batches of it."""
    imgsz = val_input_size(settings.imgsz, settings.stride, settings.fixed_shape)
    rect = settings.rect and settings.fixed_shape is None
    workers = default_workers() if settings.workers is None else settings.workers
    if settings.windows is not None:
        settings = dataclasses.replace(settings, batch_size=1)  # each image has its own size
    dataset = ValDataset(split.records, imgsz, settings.batch_size, settings.stride, rect=rect, storage=split.storage,
                         windows=settings.windows)
    dataset = split.storage.loader_dataset(dataset, lambda _epoch: shard.batches)
    shard = ValShard(len(dataset), settings.batch_size, settings.rank, settings.world_size)
    single = settings.world_size == 1
    batching = {"batch_size": settings.batch_size, "shuffle": False} if single else {"batch_sampler": shard}
    loader = DataLoader(dataset, **batching, **loader_options(workers, settings.pin_memory, settings.prefetch_factor))
    return Loader(loader, split, dataset, imgsz=imgsz)
