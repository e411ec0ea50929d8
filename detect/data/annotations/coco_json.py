"""A COCO instances json (instances_*.json): pixel boxes [left, top, width, height], iscrowd, categories by id."""

from __future__ import annotations

import collections
import json
from pathlib import Path, PurePosixPath

import numpy as np

from detect.data.annotations.parsed import ParsedLabels
from detect.data.categories import json_categories
from detect.errors import UserError


def read_coco(path: Path) -> ParsedLabels:
    """Every box of the json; class names in category-id order (data/categories.json_categories)."""
    try:
        data = json.loads(path.read_bytes())
        categories = json_categories(data["categories"])
        category_ids = [int(category["id"]) for category in categories]
        class_of = {category_id: index for index, category_id in enumerate(category_ids)}
        images = data["images"]
        row_of = {int(image["id"]): row for row, image in enumerate(images)}
        sizes = np.array([[image["width"], image["height"]] for image in images], np.float64).reshape(-1, 2)
        annotations = [item for item in data.get("annotations", []) if int(item["image_id"]) in row_of]
        owners = np.array([row_of[int(item["image_id"])] for item in annotations], np.int64)
        labels = np.array([class_of[int(item["category_id"])] for item in annotations], np.int64)
        ltwh = np.array([item["bbox"] for item in annotations], np.float64).reshape(-1, 4)
        crowd = np.array([bool(item.get("iscrowd", 0)) for item in annotations], bool)
        candidates = [(PurePosixPath(str(image["file_name"]).replace("\\", "/")).name,) for image in images]
        image_ids = [int(image["id"]) for image in images]
        names = [str(category["name"]) for category in categories]
    except OSError as error:
        raise UserError(f"{path}: cannot read ({error.strerror or error})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UserError(f"{path}: not a COCO instances json ({type(error).__name__}: {error})") from None
    if (sizes <= 0).any():
        raise UserError(f"{path}: not a COCO instances json (an image with width or height <= 0)")
    corners = np.concatenate([ltwh[:, :2], ltwh[:, :2] + ltwh[:, 2:]], axis=1)
    boxes = corners / np.tile(sizes[owners], 2) if len(owners) else corners
    return ParsedLabels(candidates=candidates, owners=owners, labels=labels, boxes=boxes, crowd=crowd,
                        class_names=names, files=[path], counts=collections.Counter(), details=[],
                        image_ids=image_ids, category_ids=category_ids)
