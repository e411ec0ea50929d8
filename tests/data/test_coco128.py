"""The shared coco128 through the bundled coco128.yaml (yolov5's layout: ../datasets/coco128 from the working folder):
the counts of record, and the COCO json source agrees with the txt labels."""

from __future__ import annotations

import numpy as np
import pytest

from detect.data import ValLoaderSettings, load_data_config, load_split
from tests.shared_data import COCO128, coco128_layout, needs_shared

pytestmark = needs_shared


@pytest.fixture(scope="module")
def config(request: pytest.FixtureRequest, tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.chdir(coco128_layout(tmp_path_factory.mktemp("coco128")))
    request.addfinalizer(monkeypatch.undo)
    return load_data_config("coco128")


def test_counts(config) -> None:
    split = load_split(config, "train")
    assert split.counts["found"] == 128 and len(split.records) == 128
    assert split.counts["background"] == 2
    label_files = [record for record in split.records if (COCO128 / "labels" / "train2017" / f"{record.path.stem}.txt").is_file()]
    assert len(label_files) == 126
    assert sum(len(record.classes) for record in split.records) == 929
    assert split.records[0].image_id == 9 and (split.records[0].width, split.records[0].height) == (640, 480)


def test_json_source_matches_txt_labels(config) -> None:
    txt = {record.image_id: record for record in load_split(config, "train").records}
    coco = load_split(config, "val")
    assert coco.coco_json is not None and coco.category_ids[:3] == [1, 2, 3] and len(coco.category_ids) == 80
    assert sum(int(record.crowd.sum()) for record in coco.records) == 10
    for record in coco.records:
        reference = txt[record.image_id]
        assert (record.width, record.height) == (reference.width, reference.height)
        classes, boxes = record.train_boxes
        order_json, order_txt = np.lexsort(boxes.T[::-1]), np.lexsort(reference.boxes.T[::-1])
        assert classes[order_json].tolist() == reference.classes[order_txt].tolist()
        np.testing.assert_allclose(boxes[order_json], reference.boxes[order_txt], atol=1e-3)


def test_val_loader_on_the_json_source_trains_no_crowd_box(config) -> None:
    from detect.data import build_val_loader

    loader = build_val_loader(load_split(config, "val"), ValLoaderSettings(320, 64, 0, pin_memory=False))
    assert loader.coco_json is not None and loader.category_ids == coco_ids()
    total = sum(len(batch.targets) for batch in loader)
    assert total == 929  # 939 json annotations less the 10 crowd ones


def coco_ids() -> list[int]:
    """The 80 COCO category ids in class order (the usual coco80 -> coco91 table)."""
    return [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33,
            34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61,
            62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90]


def test_without_the_coco_json_as_in_yolov5s_zip_val_reads_the_txt_labels(tmp_path, monkeypatch, caplog) -> None:
    zip_layout = tmp_path / "datasets" / "coco128"
    zip_layout.mkdir(parents=True)
    for folder in ("images", "labels"):  # what coco128.zip holds: no annotations/
        (zip_layout / folder).symlink_to(COCO128 / folder)
    monkeypatch.chdir(tmp_path / "datasets")
    with caplog.at_level("WARNING"):
        split = load_split(load_data_config("coco128"), "val")
    assert split.coco_json is None and len(split.records) == 128
    assert sum(len(record.classes) for record in split.records) == 929
    (warning,) = [record.getMessage() for record in caplog.records if "val_json" in record.getMessage()]
    assert "instances_train2017.json, which does not exist: the txt labels are read instead" in warning
