"""A split written `{annotations: A, images: I, format: F}`: which reader reads A (F, else the file tells), and its
boxes matched to the images of I by file name and to the data yaml's classes by name."""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from detect.data.annotations.coco_json import read_coco
from detect.data.annotations.coco_values import ID_LIMIT
from detect.data.annotations.cvat import read_cvat
from detect.data.annotations.label_studio import read_label_studio
from detect.data.annotations.parsed import ParsedLabels
from detect.data.annotations.voc import read_voc
from detect.errors import ConfigError, UserError, refuse_unknown_keys, short_repr
from detect.ops.boxes import xyxy_to_xywh

LOGGER = logging.getLogger(__name__)
READERS: dict[str, Callable[[Path], ParsedLabels]] = {
    "coco": read_coco, "voc": read_voc, "label-studio": read_label_studio, "cvat": read_cvat}
KEYS = ("annotations", "images", "format")


@dataclasses.dataclass(frozen=True)
class AnnotationSource:
    """A split's label file (or VOC folder), its images folder (or image list) and format (None: from the file)."""

    path: Path
    images: Path
    format: str | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class SplitLabels:
    """The labels of a split's images, in their order: (rows (n, 5) cls cx cy w h normalised, crowd (n,)) or None
    for an image the file does not annotate; what was left out, by name, with detail lines; the files read (the label
    cache's key); for a COCO json its path, image ids and the category id of each class."""

    given: list[tuple[np.ndarray, np.ndarray] | None]
    counts: dict[str, int]
    details: list[str]
    files: list[str]
    coco_json: Path | None = None
    image_ids: np.ndarray | None = None
    category_ids: list[int] | None = None


def annotation_source(entry: dict, root: Path, source: Path, split: str) -> AnnotationSource:
    """The `{annotations, images, format}` value of `split` in data yaml `source`, paths from `root`."""
    refuse_unknown_keys(entry, KEYS, f"{source}: '{split}' has")
    for key in ("annotations", "images"):
        if not isinstance(entry.get(key), str):
            raise ConfigError(f"{source}: '{split}' needs '{key}' as a path, got {short_repr(entry.get(key))} "
                              "(a split is an image folder, or {annotations: file, images: folder})")
    chosen = entry.get("format")
    if chosen is not None and chosen not in READERS:
        raise ConfigError(f"{source}: '{split}' format {short_repr(chosen)} is not one of {', '.join(READERS)}")
    return AnnotationSource(path=root / entry["annotations"], images=root / entry["images"], format=chosen)


def format_of(source: AnnotationSource) -> str:
    """The format given, else: a folder is VOC, an .xml CVAT, a json holding an object COCO, a list Label Studio."""
    if source.format is not None:
        return source.format
    path = source.path
    if path.is_dir():
        return "voc"
    if path.suffix.lower() == ".xml":
        return "cvat"
    try:
        with open(path, "rb") as handle:
            start = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    except OSError as error:
        raise UserError(f"{path}: cannot read the annotations ({error.strerror or error})") from None
    if start in (b"{", b"["):
        return "coco" if start == b"{" else "label-studio"
    raise UserError(f"{path}: not a label file this reads (a COCO or Label Studio json, a CVAT .xml, a folder of VOC "
                    f".xml); set 'format' ({', '.join(READERS)}) if it is one")


def read_labels(source: AnnotationSource) -> ParsedLabels:
    """Every box of the source, by its own class names."""
    if not source.path.exists():
        raise UserError(f"{source.path}: annotations not found (check 'path' and 'annotations' in the data yaml)")
    return READERS[format_of(source)](source.path)


def _match(parsed: ParsedLabels, images: Sequence[str], counts: collections.Counter, details: list[str]) -> np.ndarray:
    """(N,) the index in `images` of each annotated image, -1 where none matches or an earlier one took it."""
    by_name, by_stem = {}, {}
    for index, image in enumerate(images):
        name = os.path.basename(image)
        by_name.setdefault(name, index)
        by_stem.setdefault(os.path.splitext(name)[0], index)
    targets, taken = np.full(len(parsed.candidates), -1, np.int64), set()
    for number, candidates in enumerate(parsed.candidates):
        found = next((by_name.get(name, by_stem.get(name)) for name in candidates
                      if name in by_name or name in by_stem), None)
        where = parsed.file_of(number)
        if found is None:
            counts["annotated image not in the images folder"] += 1
            details.append(f"{where}: {' or '.join(candidates) or 'an image without a name'} is not in the images "
                           "folder, its labels left out")
        elif found in taken:
            counts["image annotated twice: the first read"] += 1
            details.append(f"{where}: {candidates[0]} is annotated again, the first annotation is read")
        else:
            targets[number] = found
            taken.add(found)
    return targets


def _class_lookup(parsed: ParsedLabels, names: Sequence[str], details: list[str]) -> np.ndarray:
    """(K,) the yaml class of each of the file's K classes, -1 for one the yaml does not name: by name; a COCO json
    none of whose category names is the yaml's, with as many categories as the yaml has names (converters that were
    not given the names write "0".."79" or "class_1"...), by order: its k-th category by id is the yaml's class k."""
    index_of = {name: index for index, name in enumerate(names)}
    lookup = np.array([index_of.get(name, -1) for name in parsed.class_names], np.int64)
    if not len(lookup) or (lookup >= 0).any():
        return lookup
    file, listed = parsed.files[0], short_repr(parsed.class_names)
    if parsed.category_ids is not None and len(lookup) == len(names):
        line = (f"{file}: none of its {len(lookup)} category names ({listed}) is one of the data yaml's names: its "
                f"categories are read in id order as the yaml's classes ({parsed.category_ids[0]} -> {names[0]!r}, "
                f"{parsed.category_ids[-1]} -> {names[-1]!r})")
        LOGGER.warning("%s", line)
        details.append(line)
        return np.arange(len(lookup), dtype=np.int64)
    raise UserError(f"{file}: none of its {len(lookup)} classes ({listed}) is among the data yaml's {len(names)} names "
                    f"({short_repr(list(names))}): every box would be left out; give the file's class names as "
                    "`names`, or leave `names` out to take the file's")


def _classes(parsed: ParsedLabels, names: Sequence[str], counts: collections.Counter,
             details: list[str]) -> tuple[np.ndarray, list[int] | None]:
    """(M,) each box's yaml class (_class_lookup), -1 for a class the yaml does not name (one warning line per name);
    for a COCO json, the json's category id of each of the yaml's classes (one the json lacks gets a fresh id above
    them all)."""
    lookup = _class_lookup(parsed, names, details)
    classes = lookup[parsed.labels] if len(parsed.labels) else np.zeros(0, np.int64)
    for label in np.unique(parsed.labels[classes < 0]):
        name, boxes = parsed.class_names[label], int((parsed.labels == label).sum())
        first = parsed.file_of(int(parsed.owners[np.argmax(parsed.labels == label)]))
        line = f"{first}: class {name!r} is not in the data yaml's names, {boxes} boxes left out"
        LOGGER.warning("%s", line)
        counts[f"unknown class {name!r}"] += boxes
        details.append(line)
    if parsed.category_ids is None:
        return classes, None
    id_of = {int(cls): category for category, cls in zip(parsed.category_ids, lookup.tolist()) if cls >= 0}
    fresh = iter(fresh_ids(parsed.category_ids, len(names)))
    return classes, [id_of[cls] if cls in id_of else next(fresh) for cls in range(len(names))]


def read_split_labels(source: AnnotationSource, names: Sequence[str], images: Sequence[str]) -> SplitLabels:
    """The labels of `images` from `source`, classes by `names`."""
    parsed = read_labels(source)
    counts, details = collections.Counter(parsed.counts), list(parsed.details)
    targets = _match(parsed, images, counts, details)
    image_ids = None if parsed.image_ids is None else _image_ids(parsed.image_ids, targets, len(images))
    classes, category_ids = _classes(parsed, names, counts, details)
    keep = classes >= 0
    rows = np.concatenate([classes[keep, None], xyxy_to_xywh(parsed.boxes[keep])], axis=1).astype(np.float32)
    owners, crowd = parsed.owners[keep], parsed.crowd[keep]
    order = np.argsort(owners, kind="stable")  # grouped by image, the file's order kept within one
    rows, crowd, owners = rows[order], crowd[order], owners[order]
    starts = np.searchsorted(owners, np.arange(len(targets)), "left")
    stops = np.searchsorted(owners, np.arange(len(targets)), "right")
    given: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(images)
    for number in np.flatnonzero(targets >= 0):
        given[targets[number]] = (rows[starts[number]:stops[number]], crowd[starts[number]:stops[number]])
    return SplitLabels(given=given, counts=dict(counts), details=details, files=[str(path) for path in parsed.files],
                       coco_json=None if category_ids is None else source.path, image_ids=image_ids,
                       category_ids=category_ids)


def _image_ids(json_ids: list[int], targets: np.ndarray, count: int) -> np.ndarray:
    """The json's id of each image; one it does not annotate gets a fresh id above them all."""
    ids = np.zeros(count, np.int64)
    matched = np.zeros(count, bool)
    ids[targets[targets >= 0]] = np.array(json_ids, np.int64)[targets >= 0]
    matched[targets[targets >= 0]] = True
    ids[~matched] = fresh_ids(json_ids, int((~matched).sum()))
    return ids


def fresh_ids(taken: Sequence[int], count: int) -> list[int]:
    """`count` ids that none of `taken` is: above them all, or below them all where that would pass 2**63 - 1."""
    top = max(taken, default=0)
    start = top + 1 if top + count < ID_LIMIT else min(taken) - count
    return list(range(start, start + count))


def names_of(source: AnnotationSource) -> tuple[str, ...]:
    """The class names a label file defines, in its order: a data yaml without `names` takes these."""
    return tuple(read_labels(source).class_names)
