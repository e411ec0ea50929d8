"""A dataset split: list its images, check them (check.py, cached), summarise problems, give records."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import numpy as np

from detect.data.annotations.formats import AnnotationSource, read_split_labels
from detect.data.data_config import DataConfig, open_storage
from detect.data.labels import cache as label_cache
from detect.data.labels.check import DEFAULT_BOUNDS, ImageBounds
from detect.data.labels.checked import CheckedImages, check_images, summarise
from detect.data.records import RecordTable, assign_image_ids, label_path_for
from detect.data.storage.local import LOCAL, Storage
from detect.data.storage.places import folder_writable
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)

# Our label cache sits beside the labels as <split folder>.detect.cache: yolov5 keeps its own (a numpy pickle) at
# <split folder>.cache, and with one name each tool would find the other's file unreadable and re-check every image.
CACHE_SUFFIX = ".detect.cache"


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


def _write_details(cache_file: Path, details: list[str]) -> Path | None:
    """The label-check details beside the label cache (cache_path put both where they can be written)."""
    target = cache_file.with_suffix(".problems.txt")
    if not folder_writable(target.parent):
        LOGGER.warning("%s: folder is not writable, the label-check details are not written", target.parent)
        return None
    try:
        target.write_text("\n".join(details) + "\n")
    except OSError as error:
        LOGGER.warning("%s: cannot write the label-check details (%s)", target, error)
        return None
    LOGGER.info("label-check details: %s", target)
    return target


@dataclasses.dataclass(frozen=True, eq=False)
class _LabelSources:
    """Where a split's labels come from: per image a .txt label file or (rows, crowd) given; the COCO json and its
    ids, if any; the usual place of the label cache and the files its key covers; what reading left out, by name."""

    labels: list[str | None]
    given: list
    coco_json: Path | None
    image_ids: np.ndarray | None
    category_ids: list[int] | None
    usual_cache: Path
    key_files: list[str]
    noted: dict[str, int] = dataclasses.field(default_factory=dict)
    details: list[str] = dataclasses.field(default_factory=list)


def _label_sources(config: DataConfig, split: str, images: list[str], storage: Storage) -> _LabelSources:
    """A split's labels: its label file's (data/annotations; a *_json is a COCO label file), fetched first from a
    bucket, or the .txt files beside the images."""
    annotated, json_file = config.annotations.get(split), config.json_files.get(split)
    for path in (annotated.path if annotated else None, json_file):
        if path is not None and storage.holds(path):
            storage.fetch_tree(path)
    if json_file is not None and not json_file.is_file():  # coco128.zip, say, has no COCO json: its txt labels score
        LOGGER.warning("%s: %s_json names %s, which does not exist: the txt labels are read instead", config.source,
                       split, json_file)
    elif json_file is not None:
        annotated = AnnotationSource(path=json_file, images=config.splits[split][0], format="coco")
    if annotated is not None:
        found = read_split_labels(annotated, config.names, images)
        usual = annotated.path.with_name(f"{annotated.path.name}.{split}{CACHE_SUFFIX}")
        return _LabelSources([None] * len(images), found.given, found.coco_json, found.image_ids, found.category_ids,
                             usual, [*images, *found.files], found.counts, found.details)
    labels = [label_path_for(image) for image in images]
    label_folder = Path(labels[0]).parent
    return _LabelSources(labels, [None] * len(images), None, None, None,
                         label_folder.with_name(label_folder.name + CACHE_SUFFIX), images + labels)


def as_single_class(split: LabelledSplit) -> LabelledSplit:
    """yolov5's --single-cls: every box is class 0, "item"; scored against these labels, not a COCO json."""
    rows = split.records.rows.copy()
    rows[:, 0] = 0
    records = dataclasses.replace(split.records, rows=rows)
    return dataclasses.replace(split, records=records, names=["item"], coco_json=None, category_ids=None)


def _listed(config: DataConfig, split: str, storage: Storage) -> tuple[list[str], list[tuple[str, str]]]:
    """The images of `split`'s sources, and the (path, why) of what their listing skipped; a split of no image is a
    UserError."""
    listings = [storage.list_images(source) for source in config.splits[split]]
    images = [image for listing in listings for image in listing.files]
    unlisted = [entry for listing in listings for entry in listing.skipped]  # (path, why): not images
    if not images:
        first = f"; {len(unlisted)} skipped, the first: {': '.join(unlisted[0])}" if unlisted else ""
        raise UserError(f"{config.source}: no images in the '{split}' split "
                        f"({', '.join(map(str, config.splits[split]))}){first}")
    return images, unlisted


def _checked(config: DataConfig, split: str, images: list[str], sources: _LabelSources, storage: Storage,
             cache_dir: str | Path | None, bounds: ImageBounds) -> tuple[CheckedImages, Path, str]:
    """The label check of `images` (from its cache when the key matches), the cache's path and state."""
    key_files, stats = storage.key_of(sources.key_files)
    cache_file = storage.cache_file(sources.usual_cache, cache_dir)
    # the names too where a label file names the classes: the same count in another order maps boxes otherwise
    key = label_cache.fingerprint(key_files, len(config.names), bounds,
                                  config.names if sources.coco_json or split in config.annotations else (), stats)
    checked = label_cache.read_cache(cache_file, key)
    if checked is not None:
        return checked, cache_file, "loaded"
    checked = check_images(images, sources.labels, sources.given, len(config.names), bounds, storage)
    return checked, cache_file, "written" if label_cache.write_cache(cache_file, key, checked) else "not written"


def load_split(config: DataConfig, split: str = "train", single_class: bool = False,
               cache_dir: str | Path | None = None, bounds: ImageBounds = DEFAULT_BOUNDS,
               storage: Storage | None = None) -> LabelledSplit:
    """Check (or load from cache) every image of `split`; one clear UserError if none is usable. With
    `single_class` the labels are checked against the yaml's classes, then all become class 0 (as_single_class).
    The label cache sits beside the labels, or in `cache_dir` (--cache-dir) or the user cache (cache_path). An image
    beyond `bounds` (--max-pixels, --max-boxes) is skipped by name. `storage`: where the files are, as open_storage
    gave it with `config` (default: opened here)."""
    if config.builtin is not None:
        # imported here: only built-in datasets need the generator
        from detect.data.builtin import ensure_builtin
        ensure_builtin(config)
    if split not in config.splits:
        raise UserError(f"{config.source}: no '{split}' split")
    if storage is None:
        config, storage = open_storage(config, cache_dir)
    images, unlisted = _listed(config, split, storage)
    sources = _label_sources(config, split, images, storage)
    checked, cache_file, cache_state = _checked(config, split, images, sources, storage, cache_dir, bounds)
    counts, details = summarise(split, images, checked, cache_state, unlisted, sources.noted, sources.details)
    details_file = _write_details(cache_file, details) if details else None
    if not counts["usable"]:
        raise UserError(f"{config.source}: no usable image in the '{split}' split ({counts['found']} found, all skipped; "
                        f"see {details_file})")
    ids = assign_image_ids(images) if sources.image_ids is None else sources.image_ids
    table = RecordTable(paths=np.array([os.fsencode(image) for image in images]), image_ids=ids,
                        widths=checked.widths, heights=checked.heights, offsets=checked.offsets, rows=checked.rows,
                        crowd=checked.crowd)
    usable = checked.usable
    records = table if usable.all() else table.take(np.flatnonzero(usable))
    labelled = LabelledSplit(records=records, names=list(config.names), coco_json=sources.coco_json,
                             category_ids=sources.category_ids, counts=counts, details_file=details_file,
                             cache_state=cache_state, cache_file=None if cache_state == "not written" else cache_file,
                             storage=storage, source=config.source)
    return as_single_class(labelled) if single_class else labelled
