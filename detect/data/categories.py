"""Class index <-> COCO category id: the one home of both rules (a COCO json's order and the 80 -> 91 map).

A COCO json source: class k is the json's k-th smallest category id. A YOLO-format dataset whose names are the
80 COCO names (yolov5's coco.yaml): class k is the k-th of COCO's 80 ids, which run 1..90 with gaps (the
"coco80 -> coco91" table). Any other YOLO-format dataset: class k is category id k + 1.
"""

from __future__ import annotations

from collections.abc import Sequence

# The 80 class names of COCO 2017 in category-id order, as yolov5's data/coco.yaml names them; they equal the
# `name` fields of instances_train2017.json sorted by id (checked in tests/data/test_categories.py).
COCO_NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors", "teddy bear",
    "hair drier", "toothbrush",
)
# Ids 1..90 that COCO 2017 does not use (categories dropped before release; instances_*2017.json "categories").
UNUSED_COCO_IDS = frozenset({12, 26, 29, 30, 45, 66, 68, 69, 71, 83})
COCO_CATEGORY_IDS = tuple(category for category in range(1, 91) if category not in UNUSED_COCO_IDS)


def is_coco(names: Sequence[str]) -> bool:
    """Whether `names` are COCO's 80 class names in COCO's order."""
    return tuple(names) == COCO_NAMES


def yolo_category_ids(names: Sequence[str]) -> tuple[int, ...]:
    """Category id of each class of a YOLO-format dataset: COCO's ids for the COCO names, else k + 1."""
    if is_coco(names):
        return COCO_CATEGORY_IDS
    return tuple(range(1, len(names) + 1))


def json_categories(categories: Sequence[dict]) -> list[dict]:
    """A COCO json's "categories" in class order: class k is the k-th smallest category id."""
    return sorted(categories, key=lambda category: int(category["id"]))
