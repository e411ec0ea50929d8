"""A label-file split through the rest of the data path: the label cache, `python -m detect.data` (summary, plots) and
`python -m detect.data convert` to yolov5's layout and to a COCO json."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from detect.data import load_data_config, load_split
from detect.data.__main__ import main
from tests.data.annotations.helpers import data_yaml, load, rows_of, write_images


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    write_images(tmp_path / "images", {"one.jpg": (64, 48), "two.jpg": (48, 64), "three.jpg": (40, 40)})
    content = {"images": [{"id": 1, "file_name": "one.jpg", "width": 64, "height": 48},
                          {"id": 2, "file_name": "two.jpg", "width": 48, "height": 64},
                          {"id": 3, "file_name": "three.jpg", "width": 40, "height": 40}],
               "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}],
               "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [8, 8, 32, 16]},
                               {"id": 2, "image_id": 1, "category_id": 2, "bbox": [0, 0, 64, 48], "iscrowd": 1},
                               {"id": 3, "image_id": 2, "category_id": 2, "bbox": [4, 16, 20, 40]},
                               {"id": 4, "image_id": 2, "category_id": 3, "bbox": [1, 1, 2, 2]}]}
    (tmp_path / "labels.json").write_text(json.dumps(content))
    return tmp_path


def test_the_label_cache_is_keyed_on_the_label_file_and_the_names(dataset: Path) -> None:
    assert load(dataset, "labels.json").cache_state == "written"
    assert load(dataset, "labels.json").cache_state == "loaded"
    assert load(dataset, "labels.json", names=["b", "a"]).cache_state == "written"  # same count, other order
    labels = dataset / "labels.json"
    labels.write_text(labels.read_text().replace('"bbox": [8, 8, 32, 16]', '"bbox": [8, 8, 32, 17]'))
    os.utime(labels, ns=(1, 1))
    split = load(dataset, "labels.json")
    assert split.cache_state == "written" and rows_of(split)["one.jpg"][0][4] == round(17 / 48, 6)


def test_the_check_command_summarises_and_plots(dataset: Path, caplog, capsys) -> None:
    source = data_yaml(dataset, "labels.json")
    with caplog.at_level(logging.INFO):
        assert main(["--data", str(source), "--plots", str(dataset / "plots"), "--imgsz", "64",
                     "--batch-size", "2"]) == 0
    assert (dataset / "plots" / "labels.png").is_file() and (dataset / "plots" / "train_batch.png").is_file()
    table = next(record.getMessage() for record in caplog.records if "label check, val split" in record.getMessage())
    assert "label file: unknown class 'c'" in table and "background: missing label file" not in table


def test_convert_to_yolo_and_to_coco_reads_back_the_same_labels(dataset: Path, capsys) -> None:
    source = data_yaml(dataset, "labels.json")
    expected = rows_of(load_split(load_data_config(source), "train"))
    assert main(["convert", "--data", str(source), "--to", "coco", "--out", str(dataset / "as_coco")]) == 0
    as_coco = load_split(load_data_config(dataset / "as_coco" / "data.yaml"), "val")
    assert rows_of(as_coco) == expected and as_coco.coco_json == dataset / "as_coco" / "val.json"
    assert main(["convert", "--data", str(dataset / "as_coco" / "data.yaml"), "--to", "yolo", "--out",
                 str(dataset / "as_yolo")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == str(dataset / "as_yolo" / "data.yaml")
    assert (dataset / "as_yolo" / "images" / "train" / "one.jpg").is_symlink()
    # yolov5's .txt has no crowd flag: crowd boxes are left out, as its own COCO converter does
    assert (dataset / "as_yolo" / "labels" / "val" / "one.txt").read_text() == "0 0.375000 0.333333 0.500000 0.333333\n"
    as_yolo = rows_of(load_split(load_data_config(dataset / "as_yolo" / "data.yaml"), "val"))
    assert as_yolo == {name: [row for row in rows if not row[5]] for name, rows in expected.items()}
    with pytest.raises(SystemExit, match="2"):
        main(["convert", "--data", str(source), "--to", "voc"])
    assert "invalid choice: 'voc'" in capsys.readouterr().err
