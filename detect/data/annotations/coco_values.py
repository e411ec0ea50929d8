"""A COCO instances json's values as tools and pandas type them, read once into one form: ids, image ids and category
ids whole numbers (1, 1.0, "1", "1.0", "np.int64(1)"), a box four numbers (a list of numbers or of numeric strings, or
one string "[x, y, w, h]"), an area a number (missing, null or NaN: the box's), iscrowd 0 or 1 (true, "0", "false"...,
missing: 0), an image's width and height whole numbers above 0. What cannot be read as one is one UserError naming
the file and the first entry that holds it. The reader (coco_json.py) and the evaluators (evaluation/) take this form,
never the file's own."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from detect.data.annotations.json_file import read_json
from detect.errors import UserError, short_repr

WHAT = "a COCO instances json"
# numpy's repr of a scalar, as str() of a numpy value wrote it into a json (np.int64(3), numpy.float32(1.5))
NUMPY_REPR = re.compile(r"(?:np|numpy)\.(?:u?int|float)\d*\((.*)\)")
ID_LIMIT = 2**63  # ids are held as signed 64-bit integers (the label check's records, faster-coco-eval's index)
CROWD = {"0": 0, "1": 1, "false": 0, "true": 1}


class _NotRead(ValueError):
    """A value that is not what its key needs: what it should be."""


def _number(value: Any) -> float:
    """`value` as a float: a number (not a bool), or a string of one (numpy's repr too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _NotRead("a number")
    if isinstance(value, str):
        text = value.strip()
        numpy = NUMPY_REPR.fullmatch(text)
        try:
            return float(numpy.group(1) if numpy else text)
        except ValueError:
            raise _NotRead("a number") from None
    return float(value)


def _whole(value: Any) -> int:
    """`value` as an int within ±2**63: an int, or a float or a string of a whole number."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        number = int(value)
    else:
        real = _number(value)
        if not math.isfinite(real) or real != int(real):
            raise _NotRead("a whole number")
        number = int(real)
    if not -ID_LIMIT < number < ID_LIMIT:
        raise _NotRead("a whole number within the signed 64 bits COCO's evaluators index by")
    return number


def _size(value: Any) -> int:
    """An image's width or height: a whole number above 0 (a box is a fraction of it)."""
    number = _whole(value)
    if number <= 0:
        raise _NotRead("a whole number above 0")
    return number


def _box(value: Any) -> list[float]:
    """`value` as [x, y, w, h]: four numbers, or a string that lists four."""
    if isinstance(value, str):
        value = [part for part in re.split(r"[\s,]+", value.strip().strip("[]()")) if part]
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        raise _NotRead("four numbers [x, y, width, height]")
    try:
        return [_number(item) for item in value]
    except _NotRead:
        raise _NotRead("four numbers [x, y, width, height]") from None


def _crowd(value: Any) -> int:
    """iscrowd as 0 or 1 (null: 0)."""
    if value is None:
        return 0
    key = None
    if isinstance(value, str):
        key = value.strip().lower()
    elif isinstance(value, (bool, int, float)) and value in (0, 1):
        key = str(int(value))
    if key not in CROWD:
        raise _NotRead("0 or 1 (or true, false)")
    return CROWD[key]


def _area(value: Any, box: list[float]) -> float:
    """The area given, or the box's where it is missing, null or NaN."""
    area = math.nan if value is None else _number(value)
    return box[2] * box[3] if math.isnan(area) else area


def _entry(kind: str, index: int, count: int, entry: dict) -> str:
    """How a message names an entry: 'annotation 5 of 209 (id 17)', 'image 3 of 128 ('a.jpg')'."""
    named = entry.get("file_name", entry.get("name", entry.get("id")))
    return f"{kind} {index + 1} of {count}" + (f" ({short_repr(named)})" if named is not None else "")


def _read_entries(entries: Any, kind: str, fields: dict, path: Path) -> list[dict]:
    """Each entry (a dict) with `fields` (key -> (reader, required)) read; UserError naming the first bad value."""
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise UserError(f"{path}: not {WHAT} (its {kind}s are not a list of objects)")
    read = []
    for index, entry in enumerate(entries):
        copy = dict(entry)
        for key, (reader, required) in fields.items():
            if key not in entry and not required:
                continue
            try:
                copy[key] = reader(entry[key])
            except KeyError:
                raise UserError(f"{path}: {_entry(kind, index, len(entries), entry)} has no '{key}'") from None
            except _NotRead as error:
                raise UserError(f"{path}: {_entry(kind, index, len(entries), entry)} has {key} "
                                f"{short_repr(entry[key])}, which is not {error}") from None
        read.append(copy)
    return read


def _annotations(entries: Any, path: Path) -> list[dict]:
    annotations = _read_entries(entries, "annotation", {
        "id": (_whole, False), "image_id": (_whole, True), "category_id": (_whole, True), "bbox": (_box, True),
        "iscrowd": (_crowd, False)}, path)
    for annotation in annotations:
        annotation.setdefault("iscrowd", 0)
        try:
            annotation["area"] = _area(annotation.get("area"), annotation["bbox"])
        except _NotRead as error:
            raise UserError(f"{path}: annotation {short_repr(annotation.get('id'))} has area "
                            f"{short_repr(annotation['area'])}, which is not {error}") from None
    return annotations


def normalised(data: Any, path: Path) -> dict:
    """The COCO instances json `data` (as read from `path`) in the one form the module says, its other keys kept."""
    if not isinstance(data, dict):
        raise UserError(f"{path}: not {WHAT} (it holds a {type(data).__name__}, not an object)")
    for key in ("images", "categories"):
        if key not in data:
            raise UserError(f"{path}: not {WHAT} (no '{key}')")
    return {**data,
            "images": _read_entries(data["images"], "image", {
                "id": (_whole, True), "width": (_size, True), "height": (_size, True), "file_name": (str, False)},
                path),
            "categories": _read_entries(data["categories"], "category", {"id": (_whole, True), "name": (str, True)},
                                        path),
            "annotations": _annotations(data.get("annotations") or [], path)}  # null: none, as a tool writes it


def read_coco_json(path: Path) -> dict:
    """The COCO instances json at `path`, read and normalised."""
    return normalised(read_json(path, WHAT), path)
