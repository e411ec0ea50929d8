"""A Label Studio JSON export: percent coordinates, upload prefixes, cancelled and extra annotations, rotation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from detect.data.annotations.label_studio import image_names
from detect.errors import UserError
from tests.data.annotations.helpers import load, rows_of, write_images


def rectangle(name: str, x: float, y: float, width: float, height: float, rotation: float = 0) -> dict:
    return {"type": "rectanglelabels", "from_name": "label", "to_name": "image", "original_width": 200,
            "original_height": 100, "value": {"x": x, "y": y, "width": width, "height": height, "rotation": rotation,
                                               "rectanglelabels": [name]}}


def task(image: str, *annotations: list[dict], cancelled: bool = False) -> dict:
    return {"id": 1, "data": {"image": image},
            "annotations": [{"result": result, "was_cancelled": cancelled} for result in annotations]}


def test_image_names_from_an_upload_a_local_file_and_a_url() -> None:
    assert image_names("/data/upload/3/1a2b3c4d-name.jpg") == ("1a2b3c4d-name.jpg", "name.jpg")
    assert image_names("/data/local-files/?d=photos/day%201/x.png") == ("x.png",)
    assert image_names("s3://bucket/set/deadbeef.jpg") == ("deadbeef.jpg",)


def test_percent_coordinates_uploads_matched_and_what_is_left_out(tmp_path: Path) -> None:
    write_images(tmp_path / "images", {"name.jpg": (200, 100), "1a2b3c4d-kept.jpg": (200, 100),
                                       "turned.jpg": (200, 100), "todo.jpg": (200, 100)})
    tasks = [
        task("/data/upload/3/1a2b3c4d-name.jpg", [rectangle("a", 10, 20, 30, 40),
                                                  {"type": "choices", "value": {"choices": ["day"]}}],
             [rectangle("b", 0, 0, 100, 100)]),  # a second annotation: the first is read
        task("/data/upload/3/1a2b3c4d-kept.jpg", [rectangle("b", 50, 50, 50, 50)]),  # its file kept the prefix
        task("/data/upload/3/0f0f0f0f-turned.jpg", [rectangle("a", 50, 0, 25, 50, rotation=90)]),
        task("/data/upload/3/abcdef12-todo.jpg", [rectangle("a", 0, 0, 10, 10)], cancelled=True),
    ]
    (tmp_path / "export.json").write_text(json.dumps(tasks))
    split = load(tmp_path, "export.json")
    rows = rows_of(split)
    assert rows["name.jpg"] == [[0, 0.25, 0.4, 0.3, 0.4, 0]]
    assert rows["1a2b3c4d-kept.jpg"] == [[1, 0.75, 0.75, 0.5, 0.5, 0]]
    # 50 px wide, 50 px high, turned 90 degrees clockwise about its top-left corner (100, 0): x 50..100, y 0..50
    assert rows["turned.jpg"] == [[0, 0.375, 0.25, 0.25, 0.5, 0]]
    assert rows["todo.jpg"] == []  # its only annotation was cancelled: not labelled
    assert split.counts["label file: task with several annotations: the first read"] == 1
    assert split.counts["label file: choices result left out"] == 1
    assert split.counts["label file: rotated box: its enclosing box read"] == 1
    assert split.counts["background: missing label file"] == 1


def test_a_file_that_is_no_export_is_one_error(tmp_path: Path) -> None:
    write_images(tmp_path / "images", {"x.jpg": (20, 20)})
    (tmp_path / "export.json").write_text(json.dumps([{"data": {"image": "x.jpg"}, "annotations": [{"result": [
        {"type": "rectanglelabels", "value": {"x": 1}}]}]}]))
    with pytest.raises(UserError, match=r"export\.json: not a Label Studio JSON export \(KeyError: 'y'\)"):
        load(tmp_path, "export.json", format="label-studio")
    (tmp_path / "export.json").write_text(json.dumps([{"image": "/data/upload/3/0a0b0c0d-x.jpg", "label": []}]))
    with pytest.raises(UserError, match=r"export\.json: not a Label Studio JSON export \(KeyError: 'data'\)"):
        load(tmp_path, "export.json")  # JSON-MIN, not JSON
    (tmp_path / "export.json").write_text(json.dumps({"tasks": []}))
    with pytest.raises(UserError, match=r"export\.json: not a Label Studio JSON export \(TypeError: the file holds"):
        load(tmp_path, "export.json", format="label-studio")
