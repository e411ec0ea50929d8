"""A dataset split: list its images, check them (in parallel, cached), summarise problems, give records."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from detect.data.data_config import DataConfig
from detect.data.labels import cache as label_cache
from detect.data.labels import check
from detect.data.labels.coco_json import read_coco_labels
from detect.data.records import (
    IMAGE_SUFFIXES,
    ImageRecord,
    assign_image_ids,
    label_path_for,
)
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)

# Our label cache sits beside the labels as <split folder>.detect.cache: yolov5 keeps its own (a numpy pickle) at
# <split folder>.cache, and with one name each tool would find the other's file unreadable and re-check every image.
CACHE_SUFFIX = ".detect.cache"


@dataclasses.dataclass(frozen=True)
class LabelledSplit:
    """The usable images of one split with their labels, and what the check found."""

    records: list[ImageRecord]
    names: list[str]
    coco_json: Path | None
    category_ids: list[int] | None
    counts: dict[str, int]
    details_file: Path | None


def list_images(source: Path) -> list[Path]:
    """Images of a folder (recursive), a .txt list of paths (relative to the list's folder), or one image."""
    if source.is_dir():
        return sorted(path for path in source.rglob("*") if path.suffix.lower() in IMAGE_SUFFIXES)
    if source.suffix == ".txt" and source.is_file():
        images = []
        for line in source.read_text().splitlines():
            line = line.strip()
            if line:
                entry = Path(line.removeprefix("./"))
                images.append(entry if entry.is_absolute() else (source.parent / entry))
        return images
    if source.is_file() and source.suffix.lower() in IMAGE_SUFFIXES:
        return [source]
    raise UserError(f"{source}: no such image folder or image list (check 'path' and the split in the data yaml)")


def _scan(images: list[Path], labels: list[Path | None], given: list, num_classes: int) -> list[check.CheckResult]:
    """Check every image in a thread pool (PIL and file reads release the GIL)."""
    workers = min(8, (os.cpu_count() or 1) * 2)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda item: check.check_image(str(item[0]), item[1] and str(item[1]), num_classes, item[2]),
                             zip(images, labels, given)))


def _summarise(split: str, results: list[check.CheckResult], cache_state: str) -> tuple[dict[str, int], list[str]]:
    counts = collections.Counter(found=len(results))
    details = []
    for result in results:
        if result.skipped:
            counts[f"skipped: {result.skipped}"] += 1
        counts.update(f"fixed: {fix}" for fix in result.fixes)
        counts.update(("background: " if note == check.MISSING_LABELS else "note: ") + note for note in result.notes)
        counts["background"] += result.background and result.skipped is None
        counts["fixed"] += bool(result.fixes) and result.skipped is None
        counts["skipped"] += result.skipped is not None
        details += result.details or ([f"{result.path}: {result.skipped}"] if result.skipped else [])
        details += [f"{result.path}: {note}" for note in result.notes]
    counts["usable"] = counts["found"] - counts["skipped"]
    lines = [f"label check, {split} split (cache {cache_state}):"]
    lines += [f"  {key:<40} {counts[key]:>8}" for key in ("found", "usable", "background", "fixed", "skipped")]
    lines += [f"  {key:<40} {value:>8}" for key, value in sorted(counts.items()) if ":" in key]
    LOGGER.info("\n".join(lines))
    return dict(counts), details


def _write_details(cache_file: Path, details: list[str]) -> Path | None:
    target = cache_file.with_suffix(".problems.txt")
    if not label_cache.folder_writable(cache_file.parent):  # e.g. a read-only dataset: the temp folder, with
        # the dataset's path hashed into the name so that two datasets' details never overwrite each other
        digest = hashlib.sha1(str(cache_file).encode()).hexdigest()[:8]
        target = Path(tempfile.gettempdir()) / f"{cache_file.stem}-{digest}.problems.txt"
    try:
        target.write_text("\n".join(details) + "\n")
    except OSError as error:
        LOGGER.warning("%s: cannot write the label-check details (%s)", target, error)
        return None
    LOGGER.info("label-check details: %s", target)
    return target


def _json_ids(images: list[Path], json_ids: dict[str, int]) -> list[int]:
    """The json's image ids; an image the json does not list gets a fresh id above them all."""
    next_id = max(json_ids.values(), default=0) + 1
    ids = []
    for image in images:
        if image.name not in json_ids:
            json_ids = {**json_ids, image.name: next_id}
            next_id += 1
        ids.append(json_ids[image.name])
    return ids


def as_single_class(split: LabelledSplit) -> LabelledSplit:
    """yolov5's --single-cls: every box is class 0, "item"; scored against these labels, not a COCO json."""
    records = [dataclasses.replace(record, classes=np.zeros_like(record.classes)) for record in split.records]
    return dataclasses.replace(split, records=records, names=["item"], coco_json=None, category_ids=None)


def load_split(config: DataConfig, split: str = "train", single_class: bool = False) -> LabelledSplit:
    """Check (or load from cache) every image of `split`; one clear UserError if none is usable. With
    `single_class` the labels are checked against the yaml's classes, then all become class 0 (as_single_class)."""
    if config.builtin is not None:
        # imported here: only built-in datasets need the generator
        from detect.data.builtin import ensure_builtin
        ensure_builtin(config)
    if split not in config.splits:
        raise UserError(f"{config.source}: no '{split}' split")
    images = [image for source in config.splits[split] for image in list_images(source)]
    if not images:
        raise UserError(f"{config.source}: no images in the '{split}' split ({', '.join(map(str, config.splits[split]))})")
    json_file = config.json_files.get(split)
    if json_file is not None:
        coco = read_coco_labels(json_file)
        labels: list[Path | None] = [None] * len(images)
        empty = (np.zeros((0, 5), np.float32), np.zeros(0, bool))
        given = [coco.rows.get(image.name, empty) for image in images]
        cache_file, key_files = json_file.with_name(f"{json_file.stem}.{split}{CACHE_SUFFIX}"), [*images, json_file]
    else:
        coco, labels, given = None, [label_path_for(image) for image in images], [None] * len(images)
        label_folder = labels[0].parent
        cache_file, key_files = label_folder.with_name(label_folder.name + CACHE_SUFFIX), images + labels
    key = label_cache.fingerprint(key_files, config.num_classes)
    results = label_cache.read_cache(cache_file, key)
    cache_state = "loaded"
    if results is None:
        results = _scan(images, labels, given, config.num_classes)
        cache_state = "written" if label_cache.write_cache(cache_file, key, results) else "not written"
    counts, details = _summarise(split, results, cache_state)
    details_file = _write_details(cache_file, details) if details else None
    ids = _json_ids(images, coco.image_ids) if coco else assign_image_ids(images)
    records = [
        ImageRecord(path=image, image_id=image_id, width=result.width, height=result.height,
                    classes=result.rows[:, 0].astype(np.int64), boxes=result.rows[:, 1:5].copy(), crowd=result.crowd)
        for image, image_id, result in zip(images, ids, results) if result.skipped is None
    ]
    if not records:
        raise UserError(f"{config.source}: no usable image in the '{split}' split ({counts['found']} found, all skipped; "
                        f"see {details_file})")
    labelled = LabelledSplit(records=records, names=list(config.names), coco_json=json_file,
                             category_ids=coco.category_ids if coco else None, counts=counts, details_file=details_file)
    return as_single_class(labelled) if single_class else labelled
