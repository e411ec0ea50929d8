"""Flat records: the label cache of 2,000 images round-trips through its arrays, and RecordTable acts as a list."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from detect.data import ImageRecord, load_data_config, load_split
from detect.data.labels import cache as label_cache
from detect.data.labels import check
from detect.data.labels.check import CheckedImages
from detect.data.records import RecordTable, assign_image_ids, label_path_for
from tests.scripts.modules import script


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of 2,000 train + 10 val images from the scale benchmark's generator, with its broken files."""
    return script("make_large_dataset").make_dataset(tmp_path_factory.mktemp("large"), 2000, 10, workers=1, seed=2).parent


def _tables_equal(first, second, fields) -> None:
    for name in fields:
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name), err_msg=name)


def test_the_cache_of_2000_images_round_trips_through_the_flat_format(generated: Path) -> None:
    config = load_data_config(generated / "data.yaml")
    first = load_split(config, "train")
    images = [str(path) for path in sorted((generated / "images" / "train").glob("*.jpg"))]
    labels = [label_path_for(image) for image in images]
    checked = CheckedImages.from_results([check.check_image(image, label, 80) for image, label in zip(images, labels)])
    cached = label_cache.read_cache(generated / "labels" / "train.detect.cache", label_cache.fingerprint(images + labels, 80))
    assert cached is not None and cached.problems == checked.problems and checked.problems
    _tables_equal(cached, checked, label_cache.ARRAYS)
    with np.load(generated / "labels" / "train.detect.cache", allow_pickle=False) as data:  # plain arrays, no pickle
        assert (data["offsets"].dtype, data["rows"].dtype, data["rows"].shape[1]) == (np.int64, np.float32, 5)
    second = load_split(config, "train")
    assert first.counts == second.counts and first.counts["found"] == 2000 and first.counts["skipped"] > 0
    _tables_equal(first.records, second.records, [field.name for field in dataclasses.fields(RecordTable)])
    assert len(first.records) == first.counts["usable"] and len(first.records.rows) == sum(
        len(record.classes) for record in first.records)


def test_any_changed_file_or_class_count_changes_the_key(generated: Path) -> None:
    images = [str(path) for path in sorted((generated / "images" / "train").glob("*.jpg"))]
    files = images + [label_path_for(image) for image in images]
    key = label_cache.fingerprint(files, 80)
    assert label_cache.fingerprint(files, 81) != key and label_cache.fingerprint(files[1:], 80) != key
    label = Path(files[-1])
    before = label.stat()
    try:
        os.utime(label, ns=(before.st_atime_ns, before.st_mtime_ns + 1))  # same bytes, a nanosecond later
        assert label_cache.fingerprint(files, 80) != key
    finally:
        os.utime(label, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert label_cache.fingerprint(files, 80) == key


def _record(name: str, image_id: int, boxes: int) -> ImageRecord:
    rows = np.arange(boxes * 4, dtype=np.float32).reshape(-1, 4) / 100
    return ImageRecord(Path(f"images/{name}.jpg"), image_id, 100 + image_id, 50 + image_id,
                       np.arange(boxes) % 3, rows, np.arange(boxes) % 2 == 1)


def _same(first: ImageRecord, second: ImageRecord) -> None:
    assert (first.path, first.image_id, first.width, first.height) == (second.path, second.image_id,
                                                                         second.width, second.height)
    np.testing.assert_array_equal(first.classes, second.classes)
    np.testing.assert_array_equal(first.boxes, second.boxes)
    np.testing.assert_array_equal(first.crowd, second.crowd)
    assert first.classes.dtype == np.int64 and first.boxes.dtype == np.float32


def test_record_table_reads_like_the_list_it_was_made_from() -> None:
    records = [_record("a", 1, 3), _record("b", 2, 0), _record("c", 3, 5), _record("d", 4, 1)]
    table = RecordTable.from_records(records)
    assert len(table) == 4 and RecordTable.from_records(table) is table
    for made, given in zip(table, records):
        _same(made, given)
    _same(table[-1], records[-1])
    for made, given in zip(table.take([2, 0, 1]), [records[2], records[0], records[1]]):
        _same(made, given)
    for made, given in zip(table[1:3], records[1:3]):
        _same(made, given)
    classes, boxes = table[2].train_boxes
    assert classes.tolist() == [0, 2, 1] and len(boxes) == 3  # crowd rows 1 and 3 left out
    with pytest.raises(IndexError):
        table[4]


def test_image_ids_and_label_paths_keep_the_yolov5_rules() -> None:
    assert assign_image_ids(["x/images/000000000009.jpg", "x/images/000000000025.jpg"]).tolist() == [9, 25]
    assert assign_image_ids(["b.jpg", "a.jpg", "c.png"]).tolist() == [1, 0, 2]
    assert assign_image_ids(["1.jpg", "01.jpg"]).tolist() == [1, 0]  # numeric but not unique: sorted order
    assert label_path_for("/d/images/train/images/a.b.jpg") == "/d/images/train/labels/a.b.txt"
    assert label_path_for("images/a.png") == "labels/a.txt"
    assert label_path_for("/d/pictures/a.jpg") == "/d/pictures/a.txt"
