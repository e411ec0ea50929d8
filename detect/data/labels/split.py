"""A dataset split: list its images, read where its labels come from (sources.py), check them (check.py, from the
label cache when its key matches: cache.py), sum up what the check found (report.py), give records."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from detect.data.data_config import DataConfig, open_storage
from detect.data.labels import cache as label_cache
from detect.data.labels.check import DEFAULT_BOUNDS, ImageBounds
from detect.data.labels.checked import check_images
from detect.data.labels.report import summarise
from detect.data.labels.sources import label_sources
from detect.data.records import RecordTable, assign_image_ids
from detect.data.storage.interface import Storage
from detect.data.storage.local import LOCAL
from detect.errors import UserError


@dataclasses.dataclass(frozen=True)
class LabelledSplit:
    """The usable images of one split with their labels, and what the check found."""

    records: RecordTable
    names: list[str]
    coco_json: Path | None
    category_ids: list[int] | None
    counts: dict[str, int]
    details_file: Path | None
    cache_state: str  # the label cache: "loaded", "written" or "not written"
    cache_file: Path | None = None  # the label cache, where one was loaded or written
    storage: Storage = LOCAL  # where its files are: its images are read through it
    source: Path | None = None  # the data yaml, for messages


def _listed(config: DataConfig, split: str, storage: Storage) -> tuple[list[str], list[tuple[str, str]]]:
    """The images of `split`'s sources (a built-in dataset generated first), and the (path, why) of what their
    listing skipped; a split of no image is a UserError."""
    if config.builtin is not None:
        # imported here: only built-in datasets need the generator
        from detect.data.builtin import ensure_builtin
        ensure_builtin(config)
    images: list[str] = []
    unlisted: list[tuple[str, str]] = []  # (path, why): not images
    for source in config.splits[split]:
        listing = storage.list_images(source)
        images += listing.files
        unlisted += listing.skipped
    if not images:
        first = f"; {len(unlisted)} skipped, the first: {': '.join(unlisted[0])}" if unlisted else ""
        raise UserError(f"{config.source}: no images in the '{split}' split "
                        f"({', '.join(map(str, config.splits[split]))}){first}")
    return images, unlisted


def load_split(config: DataConfig, split: str = "train", single_class: bool = False,
               cache_dir: str | Path | None = None, bounds: ImageBounds = DEFAULT_BOUNDS,
               storage: Storage | None = None) -> LabelledSplit:
    """Check (or load from cache) every image of `split`; one clear UserError if none is usable. With
    `single_class` (yolov5's --single-cls) the labels are checked against the yaml's classes, then every box becomes
    class 0, "item", scored against these labels, not a COCO json. The label cache sits beside the labels, or in
    `cache_dir` (--cache-dir) or the user cache (cache_path). An image beyond `bounds` (--max-pixels, --max-boxes) is
    skipped by name. `storage`: where the files are, as open_storage gave it with `config` (default: opened here)."""
    if split not in config.splits:
        raise UserError(f"{config.source}: no '{split}' split")
    if storage is None:
        config, storage = open_storage(config, cache_dir)
    images, unlisted = _listed(config, split, storage)
    sources = label_sources(config, split, images, storage)
    key_files, stats = storage.key_of(sources.key_files)
    cache_file = storage.cache_file(sources.usual_cache, cache_dir)
    # the names too where a label file names the classes: the same count in another order maps boxes otherwise
    key = label_cache.fingerprint(key_files, len(config.names), bounds, config.names if sources.named else (), stats)
    cached = label_cache.read_cache(cache_file, key)
    checked = cached or check_images(images, sources.labels, sources.given, len(config.names), bounds, storage)
    counts, details = summarise(split, images, checked, cached is not None, unlisted, sources.noted, sources.details)
    cache_state, details_file = label_cache.keep(cache_file, key, None if cached else checked, details)
    if not counts["usable"]:
        raise UserError(f"{config.source}: no usable image in the '{split}' split ({counts['found']} found, all skipped; "
                        f"see {details_file})")
    ids = assign_image_ids(images) if sources.image_ids is None else sources.image_ids
    records = RecordTable(paths=np.array(list(map(os.fsencode, images))), image_ids=ids,
                          widths=checked.widths, heights=checked.heights, offsets=checked.offsets, rows=checked.rows,
                          crowd=checked.crowd)
    usable = checked.usable
    records = records if usable.all() else records.take(np.flatnonzero(usable))
    return LabelledSplit(records=records.single_class() if single_class else records,
                         names=["item"] if single_class else list(config.names),
                         coco_json=None if single_class else sources.coco_json,
                         category_ids=None if single_class else sources.category_ids, counts=counts,
                         details_file=details_file, cache_state=cache_state,
                         cache_file=None if cache_state == "not written" else cache_file, storage=storage,
                         source=config.source)
