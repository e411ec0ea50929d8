"""Class index <-> COCO category id: the 80 -> 91 map equals the official json; other datasets count from 1."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from detect.data.annotations.coco_json import read_coco
from detect.data.categories import COCO_CATEGORY_IDS, COCO_NAMES, is_coco, json_categories, yolo_category_ids
from detect.errors import UserError
from tests.shared_data import COCO128_JSON, needs_shared


@needs_shared
def test_coco_map_equals_the_official_categories() -> None:
    categories = json_categories(json.loads(COCO128_JSON.read_text())["categories"])
    assert tuple(category["id"] for category in categories) == COCO_CATEGORY_IDS
    assert tuple(category["name"] for category in categories) == COCO_NAMES
    assert read_coco(COCO128_JSON).category_ids == list(COCO_CATEGORY_IDS)


def test_yolo_category_ids() -> None:
    ids = yolo_category_ids(list(COCO_NAMES))
    assert len(ids) == 80 and ids[:12] == (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13) and ids[-1] == 90
    assert yolo_category_ids(["cat", "dog"]) == (1, 2)
    # COCO's names in another order (or a subset) are not COCO: their classes do not mean COCO's categories.
    swapped = [COCO_NAMES[1], COCO_NAMES[0], *COCO_NAMES[2:]]
    assert not is_coco(swapped) and yolo_category_ids(swapped) == tuple(range(1, 81))
    assert not is_coco(COCO_NAMES[:79])


def test_json_class_order_is_by_id_not_by_listing(tmp_path: Path) -> None:
    listed = [{"id": 7, "name": "b"}, {"id": 3, "name": "a"}, {"id": 12, "name": "c"}]
    assert [category["name"] for category in json_categories(listed)] == ["a", "b", "c"]
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({
        "categories": listed,
        "images": [{"id": 5, "file_name": "x/5.jpg", "width": 200, "height": 100}],
        "annotations": [{"image_id": 5, "category_id": 12, "bbox": [10, 20, 40, 30], "iscrowd": 0},
                        {"image_id": 5, "category_id": 3, "bbox": [0, 0, 200, 100], "iscrowd": 1}],
    }))
    labels = read_coco(path)
    assert labels.category_ids == [3, 7, 12] and labels.image_ids == [5] and labels.candidates == [("5.jpg",)]
    assert labels.class_names == ["a", "b", "c"] and labels.labels.tolist() == [2, 0]
    np.testing.assert_allclose(labels.boxes, [[0.05, 0.2, 0.25, 0.5], [0, 0, 1.0, 1.0]], rtol=1e-6)
    assert labels.crowd.tolist() == [False, True]


def test_annotation_of_an_unlisted_category_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({
        "categories": [{"id": 1, "name": "a"}],
        "images": [{"id": 5, "file_name": "5.jpg", "width": 200, "height": 100}],
        "annotations": [{"image_id": 5, "category_id": 2, "bbox": [10, 20, 40, 30]}],
    }))
    with pytest.raises(UserError, match=r"instances\.json: an annotation has category_id 2, which is not among its "
                                        r"categories \(1\)"):
        read_coco(path)
