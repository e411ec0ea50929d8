"""A COCO instances json as a split: classes by name whatever the category ids, crowd boxes, its own ground truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from detect.data import load_data_config
from detect.errors import ConfigError, UserError
from detect.evaluation.evaluator import CocoEvaluator
from tests.data.annotations.helpers import data_yaml, load, rows_of, write_images


@pytest.fixture
def coco(tmp_path: Path) -> Path:
    write_images(tmp_path / "images", {"one.jpg": (200, 100), "empty.jpg": (50, 50), "unlisted.jpg": (50, 50)})
    content = {
        "images": [{"id": 42, "file_name": "sub/one.jpg", "width": 200, "height": 100},
                   {"id": 7, "file_name": "empty.jpg", "width": 50, "height": 50},
                   {"id": 8, "file_name": "gone.jpg", "width": 50, "height": 50}],
        # category ids in no particular order: the yaml's names decide the classes
        "categories": [{"id": 9, "name": "b"}, {"id": 3, "name": "cat"}, {"id": 5, "name": "a"}],
        "annotations": [{"id": 1, "image_id": 42, "category_id": 9, "bbox": [20, 10, 40, 20], "iscrowd": 0},
                        {"id": 2, "image_id": 42, "category_id": 5, "bbox": [0, 0, 100, 100], "iscrowd": 1},
                        {"id": 3, "image_id": 42, "category_id": 3, "bbox": [0, 0, 10, 10], "iscrowd": 0}]}
    (tmp_path / "instances_val.json").write_text(json.dumps(content))
    return tmp_path


def test_classes_by_name_crowd_kept_and_its_own_ground_truth(coco: Path) -> None:
    split = load(coco, "instances_val.json")
    assert rows_of(split) == {"one.jpg": [[1, 0.2, 0.2, 0.2, 0.2, 0], [0, 0.25, 0.5, 0.5, 1.0, 1]], "empty.jpg": [],
                              "unlisted.jpg": []}
    assert {record.path.name: record.image_id for record in split.records} == {"one.jpg": 42, "empty.jpg": 7,
                                                                              "unlisted.jpg": 43}
    assert split.coco_json == coco / "instances_val.json" and split.category_ids == [5, 9]
    assert split.counts["label file: unknown class 'cat'"] == 1
    assert split.counts["label file: annotated image not in the images folder"] == 1  # gone.jpg
    assert split.counts["background: missing label file"] == 1  # unlisted.jpg: in the folder, not in the json
    evaluator = CocoEvaluator.for_split(split)
    assert evaluator.json_file == coco / "instances_val.json"
    assert evaluator.category_ids == (5, 9) and evaluator.class_names == ("a", "b")
    # unlisted.jpg, background here, is scored as background there, not refused as an unknown image
    evaluator.add(43, np.array([[0.0, 0, 10, 10, 0.9, 1]]))
    assert 43 in evaluator.image_ids() and evaluator.evaluate().map50 == 0.0


def test_a_name_the_json_lacks_gets_a_fresh_category_id_and_names_default_to_the_categories(coco: Path) -> None:
    assert load(coco, "instances_val.json", names=["b", "dog"]).category_ids == [9, 10]
    names_from_file = load(coco, "instances_val.json", names=None)
    assert names_from_file.names == ["cat", "a", "b"] and names_from_file.category_ids == [3, 5, 9]


def test_format_explicit_a_bad_format_and_val_json_beside_annotations(coco: Path) -> None:
    assert load(coco, "instances_val.json", format="coco").category_ids == [5, 9]
    with pytest.raises(ConfigError, match="'train' format 'yolo' is not one of coco, voc, label-studio, cvat"):
        load(coco, "instances_val.json", format="yolo")
    with pytest.raises(ConfigError, match="'train' has unknown key 'label'"):
        load(coco, "instances_val.json", label="x")
    source = data_yaml(coco, "instances_val.json")
    source.write_text(source.read_text() + "val_json: instances_val.json\n")
    with pytest.raises(ConfigError, match="'val' reads its labels from annotations, so 'val_json' is not needed"):
        load_data_config(source)


def test_a_malformed_json_is_one_error_naming_it(coco: Path) -> None:
    (coco / "instances_val.json").write_text(json.dumps({"images": [], "annotations": []}))
    with pytest.raises(UserError, match=r"instances_val\.json: not a COCO instances json \(no 'categories'\)"):
        load(coco, "instances_val.json")
    (coco / "instances_val.json").write_text("{not json")
    with pytest.raises(UserError, match=r"instances_val\.json: not a COCO instances json \(JSONDecodeError"):
        load(coco, "instances_val.json")
