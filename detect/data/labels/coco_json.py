"""COCO instances json as a label source (class order: data/categories.py); crowd boxes kept, flagged."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np

from detect.data.categories import json_categories
from detect.errors import UserError
from detect.ops.boxes import ltwh_to_xyxy, xyxy_to_xywhn


@dataclasses.dataclass(frozen=True)
class CocoLabels:
    """Per image file name: (rows (n, 5) cls cx cy w h normalised, crowd (n,) bool) and the json image id."""

    rows: dict[str, tuple[np.ndarray, np.ndarray]]
    image_ids: dict[str, int]
    category_ids: list[int]

    def ids_of(self, images: list[str]) -> np.ndarray:
        """The json's image ids; an image the json does not list gets a fresh id above them all."""
        known = self.image_ids
        next_id = max(known.values(), default=0) + 1
        ids = []
        for name in map(os.path.basename, images):
            if name not in known:
                known = {**known, name: next_id}
                next_id += 1
            ids.append(known[name])
        return np.array(ids, np.int64)


def read_coco_labels(path: Path) -> CocoLabels:
    """Read an instances json; boxes normalised by the json's own image width and height."""
    if not path.is_file():
        raise UserError(f"{path}: COCO json not found (set *_json in the data yaml relative to 'path')")
    try:
        data = json.loads(path.read_text())
        category_ids = [int(category["id"]) for category in json_categories(data["categories"])]
        images = {int(image["id"]): image for image in data["images"]}
        class_of = {category_id: index for index, category_id in enumerate(category_ids)}
        annotations = [item for item in data.get("annotations", []) if int(item["image_id"]) in images]
        owners = np.array([int(item["image_id"]) for item in annotations], np.int64)
        classes = np.array([class_of[int(item["category_id"])] for item in annotations], np.float32)
        ltwh = np.array([item["bbox"] for item in annotations], np.float64).reshape(-1, 4)
        crowd = np.array([bool(item.get("iscrowd", 0)) for item in annotations], bool)
        sizes = np.array([[images[owner]["width"], images[owner]["height"]] for owner in owners], np.float64)
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path}: not a COCO instances json ({error})") from None
    sizes = sizes.reshape(-1, 2)
    boxes = xyxy_to_xywhn(ltwh_to_xyxy(ltwh), sizes[:, 0], sizes[:, 1]).astype(np.float32)
    # Group the annotations by image: sorted by owner (stable: json order within an image), sliced per image.
    order = np.argsort(owners, kind="stable")
    table, crowd, owners = np.concatenate((classes[:, None], boxes), axis=1)[order], crowd[order], owners[order]
    ids = np.array(list(images), np.int64)
    starts, stops = np.searchsorted(owners, ids, "left"), np.searchsorted(owners, ids, "right")
    rows, image_ids = {}, {}
    for image_id, start, stop in zip(images, starts, stops):
        name = Path(images[image_id]["file_name"]).name
        rows[name] = (table[start:stop], crowd[start:stop])
        image_ids[name] = image_id
    return CocoLabels(rows=rows, image_ids=image_ids, category_ids=category_ids)
