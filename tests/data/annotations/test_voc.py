"""A folder of Pascal VOC .xml files: 1-based pixels, difficult objects, names, matching, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from detect.data import load_data_config
from detect.errors import UserError
from detect.evaluation.evaluator import CocoEvaluator
from tests.data.annotations.helpers import load, rows_of, write_images

OBJECT = ("<object><name>{name}</name><difficult>{difficult}</difficult><bndbox><xmin>{box[0]}</xmin>"
          "<ymin>{box[1]}</ymin><xmax>{box[2]}</xmax><ymax>{box[3]}</ymax></bndbox></object>")


def write_voc(path: Path, filename: str | None, size: tuple[int, int], objects: list[tuple]) -> None:
    named = f"<filename>{filename}</filename>" if filename else ""
    body = "".join(OBJECT.format(name=name, box=box, difficult=difficult) for name, box, difficult in objects)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<annotation>{named}<size><width>{size[0]}</width><height>{size[1]}</height></size>{body}"
                    "</annotation>")


@pytest.fixture
def voc(tmp_path: Path) -> Path:
    write_images(tmp_path / "images", {"whole.jpg": (100, 50), "two.jpg": (100, 50), "bare.jpg": (40, 40)})
    write_voc(tmp_path / "xml" / "whole.xml", "whole.jpg", (100, 50), [("a", (1, 1, 100, 50), 0)])
    # <filename> wrong (a tool's copy of another file): the image is found by the xml's stem, as yolov5 finds it
    write_voc(tmp_path / "xml" / "two.xml", "renamed.png", (100, 50),
              [("b", (11, 6, 30, 25), 0), ("a", (51, 1, 60, 10), 1), ("zebra", (1, 1, 5, 5), 0)])
    return tmp_path


def test_one_based_pixels_difficult_as_crowd_and_an_unknown_name(voc: Path, caplog) -> None:
    with caplog.at_level("WARNING"):
        split = load(voc, "xml")
    rows = rows_of(split)
    assert rows["whole.jpg"] == [[0, 0.5, 0.5, 1.0, 1.0, 0]]  # xmin=1..xmax=W covers the whole image
    # x from 10 to 30 of 100, y from 5 to 25 of 50; the difficult box is a crowd box
    assert rows["two.jpg"] == [[1, 0.2, 0.3, 0.2, 0.4, 0], [0, 0.55, 0.1, 0.1, 0.2, 1]]
    assert rows["bare.jpg"] == [] and split.counts["background: missing label file"] == 1
    assert split.counts["label file: unknown class 'zebra'"] == 1
    (line,) = [record.getMessage() for record in caplog.records if "zebra" in record.getMessage()]
    assert line == f"{voc / 'xml' / 'two.xml'}: class 'zebra' is not in the data yaml's names, 1 boxes left out"
    two = next(record for record in split.records if record.path.name == "two.jpg")
    assert two.train_boxes[0].tolist() == [1]  # not trained on, but in the ground truth as a crowd region
    ground_truth = CocoEvaluator.for_split(split).ground_truth.dataset["annotations"]
    assert sorted(item["iscrowd"] for item in ground_truth) == [0, 0, 1]


def test_datumaros_zero_based_float_corners_are_read_by_vocs_one_based_rule(tmp_path: Path) -> None:
    """Datumaro's voc_detection export writes 0-based float corners (xmin 10.5 is 10.5 px from the left edge); VOC's
    rule, kept, reads them 1 px further left and up: the box 1 px wider and taller (docs/data.md, Coordinates)."""
    write_images(tmp_path / "images", {"car.jpg": (100, 50)})
    write_voc(tmp_path / "xml" / "car.xml", "car.jpg", (100, 50), [("a", (10.5, 5.25, 30.5, 25.25), 0)])
    assert rows_of(load(tmp_path, "xml")) == {"car.jpg": [[0, 0.2, 0.295, 0.21, 0.42, 0]]}  # x 9.5..30.5, y 4.25..25.25


def test_names_from_the_files_when_the_yaml_has_none(voc: Path) -> None:
    split = load(voc, "xml", names=None)
    assert split.names == ["a", "b", "zebra"] and rows_of(split)["two.jpg"][0][0] == 1


def test_a_malformed_file_or_a_dtd_is_one_error_naming_it(voc: Path) -> None:
    (voc / "xml" / "whole.xml").write_text("<annotation><size><width>100</width></annotation>")
    with pytest.raises(UserError, match=r"whole\.xml: not well-formed XML \(mismatched tag"):
        load(voc, "xml")
    (voc / "xml" / "whole.xml").write_text('<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "xx">]><annotation>&x;'
                                           "</annotation>")
    with pytest.raises(UserError, match=r"whole\.xml: XML with a DTD or entity declaration is refused"):
        load(voc, "xml")
    write_voc(voc / "xml" / "whole.xml", "whole.jpg", (100, 50), [("a", (1, "one", 100, 50), 0)])
    with pytest.raises(UserError, match=r"whole\.xml: not a Pascal VOC annotation \(<ymin> is 'one'"):
        load(voc, "xml")


def test_a_missing_folder_names_the_key(voc: Path) -> None:
    from detect.data.data_config import check_sources
    from detect.errors import ConfigError
    from tests.data.annotations.helpers import data_yaml

    with pytest.raises(ConfigError, match="'train' annotations names .*nowhere, which does not exist"):
        check_sources(load_data_config(data_yaml(voc, "nowhere")), ("train",))
