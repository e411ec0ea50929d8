"""A dataset split: list its images, check them (check.py, cached), summarise problems, give records."""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
from pathlib import Path

import numpy as np

from detect.data.annotations.formats import AnnotationSource, read_split_labels
from detect.data.data_config import DataConfig
from detect.data.images.files import Listing, walk
from detect.data.labels import cache as label_cache
from detect.data.labels.check import DEFAULT_BOUNDS, ImageBounds
from detect.data.labels.checked import check_images, summarise
from detect.data.records import IMAGE_SUFFIXES, RecordTable, assign_image_ids, label_path_for
from detect.data.remote.mount import attach
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)

# Our label cache sits beside the labels as <split folder>.detect.cache: yolov5 keeps its own (a numpy pickle) at
# <split folder>.cache, and with one name each tool would find the other's file unreadable and re-check every image.
CACHE_SUFFIX = ".detect.cache"
SUFFIXES = {suffix.removeprefix(".") for suffix in IMAGE_SUFFIXES}


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


def list_images(source: Path) -> Listing:
    """Images of a folder (recursive: files.walk, links followed, loops and special files named), a .txt list of
    paths (relative to the list's folder), or one image; as strings, since a 118k split's Path objects alone would
    cost tens of MB and most of a second. A listed path that cannot be read is named by the label check."""
    try:
        mode = os.stat(source).st_mode
    except OSError:
        mode = 0
    if stat.S_ISDIR(mode):
        return walk(str(source), _is_image)
    if source.suffix == ".txt" and stat.S_ISREG(mode):
        return Listing(_listed_images(source))
    if mode and source.suffix.lower() in IMAGE_SUFFIXES:
        return Listing([str(source)])
    raise UserError(f"{source}: no such image folder or image list (check 'path' and the split in the data yaml)")


def _is_image(name: str) -> bool:
    return name.rpartition(".")[2].lower() in SUFFIXES


def _listed_images(source: Path) -> list[str]:
    """The paths of a .txt image list, relative ones from the list's folder."""
    try:
        text = source.read_text()
    except OSError as error:
        raise UserError(f"{source}: cannot read the image list ({error.strerror or error})") from None
    images = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            entry = Path(line.removeprefix("./"))
            images.append(str(entry if entry.is_absolute() else (source.parent / entry)))
    return images


def _write_details(cache_file: Path, details: list[str]) -> Path | None:
    """The label-check details beside the label cache (cache_path put both where they can be written)."""
    target = cache_file.with_suffix(".problems.txt")
    if not label_cache.folder_writable(target.parent):
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


def _label_sources(config: DataConfig, split: str, images: list[str]) -> _LabelSources:
    """A split's labels: its label file's (data/annotations; a *_json is a COCO label file), or the .txt files beside
    the images."""
    annotated, json_file = config.annotations.get(split), config.json_files.get(split)
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


def load_split(config: DataConfig, split: str = "train", single_class: bool = False,
               cache_dir: str | Path | None = None, bounds: ImageBounds = DEFAULT_BOUNDS) -> LabelledSplit:
    """Check (or load from cache) every image of `split`; one clear UserError if none is usable. With
    `single_class` the labels are checked against the yaml's classes, then all become class 0 (as_single_class).
    The label cache sits beside the labels, or in `cache_dir` (--cache-dir) or the user cache (cache_path). An image
    beyond `bounds` (--max-pixels, --max-boxes) is skipped by name."""
    if config.builtin is not None:
        # imported here: only built-in datasets need the generator
        from detect.data.builtin import ensure_builtin
        ensure_builtin(config)
    if split not in config.splits:
        raise UserError(f"{config.source}: no '{split}' split")
    mount = None
    if config.remote is not None:  # a bucket: listed, and its files fetched as they are read (data/remote/mount.py)
        config, mount = attach(config, cache_dir)
        root = mount.key(config.root)
    listings = [list_images(source) if mount is None else mount.list_images(source, root, list_images)
                for source in config.splits[split]]
    images = [image for listing in listings for image in listing.files]
    unlisted = [entry for listing in listings for entry in listing.skipped]  # (path, why): not images
    if not images:
        first = f"; {len(unlisted)} skipped, the first: {': '.join(unlisted[0])}" if unlisted else ""
        raise UserError(f"{config.source}: no images in the '{split}' split "
                        f"({', '.join(map(str, config.splits[split]))}){first}")
    json_file = config.json_files.get(split)
    if json_file is not None and mount is not None and mount.listed([str(json_file)]):
        mount.fetch(mount.key(json_file))
    sources = _label_sources(config, split, images)
    if mount is None:
        cache_file, key_files, stats = label_cache.cache_path(sources.usual_cache, cache_dir), sources.key_files, None
    else:  # named by object keys, not by the cache folder: a node that is sent this cache finds it its own
        cache_file = label_cache.relocated(Path(mount.key(sources.usual_cache)), mount.meta)
        key_files, stats = [mount.key(path) for path in sources.key_files], mount.file_stats(sources.key_files)
    # the names too where a label file names the classes: the same count in another order maps boxes otherwise
    key = label_cache.fingerprint(key_files, config.num_classes, bounds,
                                  config.names if sources.coco_json or split in config.annotations else (), stats)
    checked = label_cache.read_cache(cache_file, key)
    cache_state = "loaded"
    if checked is None:
        checker = check_images if mount is None else mount.check_images
        checked = checker(images, sources.labels, sources.given, config.num_classes, bounds)
        cache_state = "written" if label_cache.write_cache(cache_file, key, checked) else "not written"
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
                             cache_state=cache_state, cache_file=None if cache_state == "not written" else cache_file)
    return as_single_class(labelled) if single_class else labelled
