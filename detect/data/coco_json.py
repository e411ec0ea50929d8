"""COCO instances json as a label source: class k <-> category id sorted(ids)[k]; crowd boxes kept, flagged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from detect.errors import UserError


@dataclasses.dataclass(frozen=True)
class CocoLabels:
    """Per image file name: (rows (n, 5) cls cx cy w h normalised, crowd (n,) bool) and the json image id."""

    rows: dict[str, tuple[np.ndarray, np.ndarray]]
    image_ids: dict[str, int]
    category_ids: list[int]


def read_coco_labels(path: Path) -> CocoLabels:
    """Read an instances json; boxes normalised by the json's own image width and height."""
    if not path.is_file():
        raise UserError(f"{path}: COCO json not found (set *_json in the data yaml relative to 'path')")
    try:
        data = json.loads(path.read_text())
        category_ids = sorted(int(category["id"]) for category in data["categories"])
        images = {int(image["id"]): image for image in data["images"]}
        annotations = data.get("annotations", [])
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path}: not a COCO instances json ({error})") from None
    class_of = {category_id: index for index, category_id in enumerate(category_ids)}
    per_image: dict[int, list[list[float]]] = {image_id: [] for image_id in images}
    for annotation in annotations:
        image = images.get(int(annotation["image_id"]))
        if image is None:
            continue
        x, y, width, height = (float(value) for value in annotation["bbox"])
        image_width, image_height = float(image["width"]), float(image["height"])
        per_image[int(annotation["image_id"])].append([
            class_of[int(annotation["category_id"])],
            (x + width / 2) / image_width,
            (y + height / 2) / image_height,
            width / image_width,
            height / image_height,
            float(annotation.get("iscrowd", 0)),
        ])
    rows, image_ids = {}, {}
    for image_id, image in images.items():
        table = np.array(per_image[image_id], np.float32).reshape(-1, 6)
        name = Path(image["file_name"]).name
        rows[name] = (table[:, :5].copy(), table[:, 5] > 0)
        image_ids[name] = image_id
    return CocoLabels(rows=rows, image_ids=image_ids, category_ids=category_ids)
