"""A COCO instances json (instances_*.json): pixel boxes [left, top, width, height], iscrowd, categories by id; its
values read as tools type them (coco_values.py).

What a file says that cannot be read one way only is refused in one line naming the id: two images or two categories
with one id (whose boxes would go to either), an annotation whose category the file does not list. An annotation of
an image the file does not list is left out, counted. Annotation ids are not read: repeated ones (Datumaro's export
from YOLO labels repeats them) are boxes like any other."""

from __future__ import annotations

import collections
from pathlib import Path, PurePosixPath

import numpy as np

from detect.data.annotations.coco_values import WHAT, read_coco_json
from detect.data.annotations.parsed import ParsedLabels
from detect.data.categories import json_categories
from detect.errors import UserError, short_repr

UNLISTED_IMAGE = "annotation of an image the json does not list"
PLURAL = {"category": "categories", "image": "images"}


def read_coco(path: Path) -> ParsedLabels:
    """Every box of the json; class names in category-id order (data/categories.json_categories)."""
    data = read_coco_json(path)
    try:
        return _parse(data, path)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UserError(f"{path}: not {WHAT} ({type(error).__name__}: {error})") from None


def _unique_ids(entries: list[dict], kind: str, path: Path) -> list[int]:
    """The `id` of each entry (an image or a category: `kind`); UserError naming the first id two entries share."""
    ids = [int(entry["id"]) for entry in entries]
    if len(set(ids)) < len(ids):
        seen: dict[int, dict] = {}
        for entry, number in zip(entries, ids):
            if number in seen:
                first, second = (short_repr(item.get("file_name", item.get("name"))) for item in (seen[number], entry))
                raise UserError(f"{path}: {PLURAL[kind]} {first} and {second} share id {number}: each {kind} needs an "
                                f"id of its own (the boxes of {kind} {number} could belong to either)")
            seen[number] = entry
    return ids


def _named(annotation: dict) -> str:
    return f"annotation {short_repr(annotation['id'])}" if "id" in annotation else "an annotation"


def _parse(data: dict, path: Path) -> ParsedLabels:
    categories = json_categories(data["categories"])
    category_ids = _unique_ids(categories, "category", path)
    images = data["images"]
    image_ids = _unique_ids(images, "image", path)
    class_of = {category_id: index for index, category_id in enumerate(category_ids)}
    row_of = {image_id: row for row, image_id in enumerate(image_ids)}
    counts, details, annotations = collections.Counter(), [], []
    for item in data.get("annotations", []):
        category_id, image_id = int(item["category_id"]), int(item["image_id"])
        if category_id not in class_of:
            listed = ", ".join(map(str, category_ids[:10])) + (", ..." if len(category_ids) > 10 else "")
            raise UserError(f"{path}: {_named(item)} has category_id {category_id}, which is not among its "
                            f"categories ({listed})")
        if image_id not in row_of:
            counts[UNLISTED_IMAGE] += 1
            details.append(f"{path}: {_named(item)} is of image {image_id}, which the json does not list: left out")
            continue
        annotations.append(item)
    sizes = np.array([[image["width"], image["height"]] for image in images], np.float64).reshape(-1, 2)
    owners = np.array([row_of[int(item["image_id"])] for item in annotations], np.int64)
    ltwh = np.array([item["bbox"] for item in annotations], np.float64).reshape(-1, 4)
    corners = np.concatenate([ltwh[:, :2], ltwh[:, :2] + ltwh[:, 2:]], axis=1)
    return ParsedLabels(
        candidates=[(PurePosixPath(str(image["file_name"]).replace("\\", "/")).name,) for image in images],
        owners=owners, labels=np.array([class_of[int(item["category_id"])] for item in annotations], np.int64),
        boxes=corners / np.tile(sizes[owners], 2) if len(owners) else corners,
        crowd=np.array([bool(item.get("iscrowd", 0)) for item in annotations], bool),
        class_names=[str(category["name"]) for category in categories], files=[path], counts=counts,
        details=details, image_ids=image_ids, category_ids=category_ids)
