"""Label check and cache: every problem kind is named and counted, the rest loads; caches are never trusted stale."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from detect.data import load_data_config, load_split
from detect.data.images.load import read_image
from detect.data.labels import check
from detect.data.labels.cache import CACHE_VERSION
from detect.errors import UserError
from tests.data.helpers import simple_dataset, write_flat_png, write_sample, write_yaml

GOOD = "0 0.5 0.5 0.2 0.2\n"


def _cache_version(path: Path) -> str:
    with np.load(path, allow_pickle=False) as data:
        return str(data["version"])


def _bad_dataset(root: Path) -> Path:
    """One image per problem kind plus good ones."""
    for index in range(3):
        write_sample(root, "train", f"good{index}", 100, 120, [(10, 10, 40, 50)])
    images, labels = root / "images" / "train", root / "labels" / "train"
    (images / "zero.png").write_bytes(b"")
    (images / "garbage.png").write_bytes(b"not an image at all" * 10)
    noise = np.random.default_rng(0).integers(0, 255, (100, 120, 3), dtype=np.uint8)
    jpeg = cv2.imencode(".jpg", noise)[1].tobytes()
    (images / "cut.jpg").write_bytes(jpeg[:-200])  # decodable but missing its end: used, with a note
    (images / "stub.jpg").write_bytes(jpeg[:300])  # header only: not decodable
    (labels / "cut.txt").write_text(GOOD)
    (labels / "stub.txt").write_text(GOOD)
    write_sample(root, "train", "tiny", 8, 40, [])
    rows = {"columns": "0 0.5 0.5 0.2\n", "text": "0 0.5 abc 0.2 0.2\n", "class": "7 0.5 0.5 0.2 0.2\n",
            "outside": "0 0.9 0.5 0.4 0.2\n", "zeroarea": GOOD + "1 0.5 0.5 0.0 0.2\n", "duplicate": GOOD + GOOD,
            "nearedge": "0 0.5 0.5 1.004 0.2\n"}
    for name, text in rows.items():
        write_sample(root, "train", name, 100, 120, [])
        (labels / f"{name}.txt").write_text(text)
    write_sample(root, "train", "background", 100, 120, [])
    (labels / "background.txt").unlink()
    return write_yaml(root)


def test_every_problem_kind_is_named_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = load_data_config(_bad_dataset(tmp_path))
    with caplog.at_level(logging.INFO):
        split = load_split(config, "train")
    counts = split.counts
    for kind in (check.ZERO_BYTE, check.UNREADABLE, check.TRUNCATED, check.TOO_SMALL, check.COLUMNS,
                 check.NON_NUMERIC, check.CLASS_RANGE, check.OUTSIDE):
        assert counts[f"skipped: {kind}"] == 1, kind
        assert kind in caplog.text
    assert counts["fixed: " + check.ZERO_AREA] == 1 and counts["fixed: " + check.DUPLICATE] == 1
    assert counts["background: " + check.MISSING_LABELS] == 1
    assert counts["note: " + check.TRUNCATED_USED] == 1
    assert counts["skipped"] == 8 and counts["found"] == 16 and counts["usable"] == 8
    names = sorted(record.path.stem for record in split.records)
    assert set(names) == {"background", "cut", "duplicate", "good0", "good1", "good2", "nearedge", "zeroarea"}
    by_name = {record.path.stem: record for record in split.records}
    assert len(by_name["duplicate"].boxes) == 1 and len(by_name["zeroarea"].boxes) == 1
    assert len(by_name["background"].boxes) == 0
    np.testing.assert_allclose(by_name["nearedge"].boxes[0], [0.5, 0.5, 1.0, 0.2], atol=1e-6)  # clipped
    assert read_image(by_name["cut"].path).shape == (100, 120, 3)
    details = split.details_file.read_text()
    assert "stub.jpg" in details and "class.txt" in details and "line 1" in details


def test_no_usable_image_is_one_clear_error(tmp_path: Path) -> None:
    write_sample(tmp_path, "train", "only", 100, 120, [])
    (tmp_path / "labels" / "train" / "only.txt").write_text("9 0.5 0.5 0.1 0.1\n")
    with pytest.raises(UserError, match="no usable image"):
        load_split(load_data_config(write_yaml(tmp_path)), "train")


def test_cache_is_used_then_rebuilt_after_a_label_edit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = load_data_config(simple_dataset(tmp_path))
    first = load_split(config, "train")
    cache = tmp_path / "labels" / "train.detect.cache"
    assert cache.is_file() and _cache_version(cache) == CACHE_VERSION
    label = tmp_path / "labels" / "train" / "0000.txt"
    label.write_text("2 0.5 0.5 0.25 0.25\n")
    os.utime(label, ns=(label.stat().st_mtime_ns + 10**9,) * 2)  # a same-second edit would still change the size
    with caplog.at_level(logging.INFO):
        second = load_split(config, "train")
    assert "stale label cache" in caplog.text
    assert len(first.records[0].classes) == 2
    assert second.records[0].classes.tolist() == [2]
    np.testing.assert_allclose(second.records[0].boxes, [[0.5, 0.5, 0.25, 0.25]])
    with caplog.at_level(logging.INFO):
        caplog.clear()
        load_split(config, "train")
    assert "cache loaded" in caplog.text


def test_unreadable_cache_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = load_data_config(simple_dataset(tmp_path))
    load_split(config, "train")
    (tmp_path / "labels" / "train.detect.cache").write_text("{not json")
    with caplog.at_level(logging.INFO):
        split = load_split(config, "train")
    assert "unreadable label cache" in caplog.text and "cache written" in caplog.text
    assert len(split.records) == 8


def test_cache_has_its_own_name_and_leaves_yolov5s_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = load_data_config(simple_dataset(tmp_path))
    theirs = tmp_path / "labels" / "train.cache"  # where yolov5 keeps its numpy-pickled label cache
    with open(theirs, "wb") as handle:
        np.save(handle, np.array({"version": 0.6, "hash": "theirs"}, dtype=object), allow_pickle=True)
    before = (theirs.read_bytes(), theirs.stat().st_mtime_ns)
    with caplog.at_level(logging.INFO):
        load_split(config, "train")
        assert "cache written" in caplog.text
        caplog.clear()
        load_split(config, "train")
        assert "cache loaded" in caplog.text
    assert (theirs.read_bytes(), theirs.stat().st_mtime_ns) == before
    assert _cache_version(tmp_path / "labels" / "train.detect.cache") == CACHE_VERSION


def test_json_source_cache_is_named_after_the_json_and_split(tmp_path: Path) -> None:
    simple_dataset(tmp_path, count=2)
    annotations = tmp_path / "annotations" / "instances.json"
    annotations.parent.mkdir()
    images = [{"id": index + 1, "file_name": f"{index:04d}.png", "width": 160, "height": 120} for index in range(2)]
    annotations.write_text(json.dumps({"images": images, "categories": [{"id": 1, "name": "a"}], "annotations": [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 12, 40, 48], "iscrowd": 0}]}))
    split = load_split(load_data_config(write_yaml(tmp_path, names=("a",), val_json="annotations/instances.json")),
                       "val")
    assert len(split.records) == 2
    assert (tmp_path / "annotations" / "instances.json.val.detect.cache").is_file()
    assert not (tmp_path / "annotations" / "instances.val.cache").exists()


@pytest.mark.parametrize("row", ["0 0.5 0.5 nan 0.2", "0 0.5 inf 0.2 0.2", "nan 0.5 0.5 0.2 0.2", "0 0.5 0.5 0.2 -inf"])
def test_a_non_finite_value_is_named_so_and_skipped(tmp_path: Path, row: str) -> None:
    write_sample(tmp_path, "train", "good", 100, 120, [(10, 10, 40, 50)])
    write_sample(tmp_path, "train", "nan", 100, 120, [])
    (tmp_path / "labels" / "train" / "nan.txt").write_text(GOOD + row + "\n")
    split = load_split(load_data_config(write_yaml(tmp_path)), "train")
    assert split.counts["skipped: " + check.NON_FINITE] == 1 and split.counts["skipped"] == 1
    assert [record.path.stem for record in split.records] == ["good"]
    assert f"nan.txt: {check.NON_FINITE} row 2" in split.details_file.read_text()


def test_an_image_over_the_pixel_limit_is_named_and_skipped_from_its_header(tmp_path: Path) -> None:
    for index in range(2):
        write_sample(tmp_path, "train", f"good{index}", 100, 120, [(10, 10, 40, 50)])
    bomb = write_flat_png(tmp_path / "images" / "train" / "bomb.png", 30000, 30000)  # 0.9 MB, 2.7 GB decoded
    (tmp_path / "labels" / "train" / "bomb.txt").write_text(GOOD)
    config = load_data_config(write_yaml(tmp_path))
    split = load_split(config, "train")
    assert split.counts["skipped: " + check.TOO_LARGE] == 1 and split.counts["usable"] == 2
    assert (f"{bomb}: {check.TOO_LARGE} (30000x30000 is 900,000,000 pixels, more than the limit of 89,478,485 "
            "(--max-pixels))") in split.details_file.read_text()
    # The limit is in the cache key: a higher one checks again, and the image passes, read past PIL's own limit.
    assert len(load_split(config, "train", bounds=check.ImageBounds(max_pixels=2**30)).records) == 3
    with pytest.raises(UserError, match="no usable image"):
        load_split(config, "train", bounds=check.ImageBounds(max_pixels=100 * 120 - 1))


def test_an_image_of_more_boxes_than_the_bound_is_named_and_skipped(tmp_path: Path) -> None:
    for index in range(2):
        write_sample(tmp_path, "train", f"good{index}", 100, 120, [(10, 10, 40, 50)])
    write_sample(tmp_path, "train", "dense", 100, 120, [])
    dense = tmp_path / "labels" / "train" / "dense.txt"
    dense.write_text("".join(f"0 0.5 0.5 {0.1 + index / 1e4:.4f} 0.1\n" for index in range(11)))
    config = load_data_config(write_yaml(tmp_path))
    split = load_split(config, "train", bounds=check.ImageBounds(max_boxes=10))
    assert split.counts["skipped: " + check.TOO_MANY_BOXES] == 1 and split.counts["usable"] == 2
    assert (f"{dense}: {check.TOO_MANY_BOXES} (11, more than the 10 an image may hold: --max-boxes)"
            in split.details_file.read_text())
    assert len(load_split(config, "train", bounds=check.ImageBounds(max_boxes=11)).records) == 3  # in the cache key
