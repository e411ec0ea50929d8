"""A checked split seen as windows: labels clipped to each, boxes cut too small dropped, empty windows sampled from the
seed, the window bound, and the data yaml's tile: key read strictly."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from detect.data import load_data_config
from detect.data.records import ImageRecord, RecordTable
from detect.data.tiles.windows import TileSettings, clip_to_window, expand_windows, log_windows
from detect.errors import ConfigError
from detect.ops.boxes import xywhn_to_xyxy, xyxy_to_xywh
from tests.data.helpers import write_yaml


def record(width: int, height: int, boxes: list[tuple[float, float, float, float]], name: str = "a.png",
           image_id: int = 0) -> ImageRecord:
    """An image record with (x1, y1, x2, y2) pixel boxes, all class 1."""
    pixels = np.array(boxes, np.float64).reshape(-1, 4)
    normalised = xyxy_to_xywh(pixels) / [width, height, width, height]
    return ImageRecord(path=name, image_id=image_id, width=width, height=height,
                       classes=np.ones(len(boxes), np.int64), boxes=normalised.astype(np.float32),
                       crowd=np.zeros(len(boxes), bool))


def test_a_box_across_a_window_edge_is_clipped_and_one_cut_too_small_dropped():
    boxes = np.array([[90, 10, 110, 30], [10, 10, 30, 30], [98, 50, 120, 70]], np.float64)
    kept, clipped = clip_to_window(boxes, np.array([0, 0, 100, 100], np.float64), min_visible=0.25)
    assert kept.tolist() == [True, True, False]  # half of the first is left; 2/22 of the third
    assert clipped[0].tolist() == [90, 10, 100, 30] and clipped[1].tolist() == [10, 10, 30, 30]
    kept, _ = clip_to_window(boxes, np.array([0, 0, 100, 100], np.float64), min_visible=0.6)
    assert kept.tolist() == [False, True, False]


def test_window_labels_are_the_image_boxes_clipped_and_normalised_to_the_window():
    image = record(300, 200, [(10, 10, 40, 40), (110, 20, 150, 60), (250, 150, 290, 190)])
    windows = expand_windows(RecordTable.from_records([image]), TileSettings(128, 0.25, min_visible=0.0,
                                                                             empty_rate=1.0), seed=0)
    assert len(windows.records) == 3 * 2 and windows.sources.tolist() == [0] * 6  # 3 columns, 2 rows of windows
    for window, crop in zip(windows.records, windows.crops):
        assert (window.width, window.height) == (crop[2] - crop[0], crop[3] - crop[1]) == (128, 128)
        back = xywhn_to_xyxy(window.boxes.astype(np.float64), 128, 128) + np.tile(crop[:2], 2)
        for box in back:  # every window box is an image box cut to the window
            assert any(np.allclose(box, np.clip(original, np.tile(crop[:2], 2), np.tile(crop[2:], 2)), atol=1e-3)
                       for original in ((10, 10, 40, 40), (110, 20, 150, 60), (250, 150, 290, 190)))
    assert str(windows.records[0].path) == "a.png" and windows.records[0].classes.tolist() == [1, 1]


def test_empty_windows_are_kept_at_the_rate_from_the_seed():
    table = RecordTable.from_records([record(2000, 2000, [(5, 5, 25, 25)], f"{index}.png", index)
                                      for index in range(4)])
    def kept(rate: float, seed: int) -> list[list[int]]:
        windows = expand_windows(table, TileSettings(200, 0.0, empty_rate=rate), seed)
        assert windows.empty_found == 4 * 99
        return windows.crops.tolist()

    assert len(kept(0.0, 0)) == 4 and len(kept(1.0, 0)) == 400
    assert kept(0.3, 1) == kept(0.3, 1)  # every rank draws the same windows
    assert kept(0.3, 1) != kept(0.3, 2)
    assert 60 < len(kept(0.3, 1)) - 4 < 180  # about 30% of 396


def test_an_image_needing_more_windows_than_the_bound_is_skipped_by_name(caplog):
    table = RecordTable.from_records([record(1000, 1000, [(5, 5, 25, 25)], "big.png"),
                                      record(300, 300, [(5, 5, 25, 25)], "small.png", 1)])
    settings = TileSettings(100, 0.0, empty_rate=0.0, max_windows=50)
    windows = expand_windows(table, settings, 0)
    assert [str(path) for path in {record.path for record in windows.records}] == ["small.png"]
    assert windows.skipped == (("big.png: 1000x1000 needs 100 windows of 100 px at overlap 0, more than "
                               "--max-windows 50"),)
    assert windows.images.paths.tolist() == [b"small.png"] and windows.sources.tolist() == [0]
    with caplog.at_level(logging.INFO):
        log_windows(windows, settings)
    assert "1 images skipped" in caplog.text and "skipped big.png: 1000x1000 needs 100 windows" in caplog.text


def test_crowd_boxes_alone_make_an_empty_window():
    image = record(200, 100, [(10, 10, 40, 40)])
    image = ImageRecord(image.path, 0, 200, 100, image.classes, image.boxes, np.array([True]))
    windows = expand_windows(RecordTable.from_records([image]), TileSettings(100, 0.0, empty_rate=0.0), 0)
    assert len(windows.records) == 0 and windows.empty_found == 2


def test_the_data_yaml_tile_key_is_read_strictly(tmp_path):
    assert load_data_config(write_yaml(tmp_path, tile={"size": 640})).tile == TileSettings(640)
    config = load_data_config(write_yaml(tmp_path, tile={"size": 320, "overlap": 0.25, "min_visible": 0.5,
                                                         "empty_rate": 0.0}))
    assert config.tile == TileSettings(320, 0.25, 0.5, 0.0)
    for tile, message in (({"size": 640, "overlpa": 0.2}, "tile: unknown key 'overlpa'"),
                          ({"size": 640, "max_windows": 9}, "tile: unknown key 'max_windows'"),
                          ({"size": "640"}, "tile: key 'size' must be int"),
                          ({"size": 640, "overlap": 0.95}, "key 'overlap' must be a number in [0, 0.9]"),
                          ({}, "tile: missing key 'size'"), (640, "key 'tile' must be dict")):
        with pytest.raises(ConfigError) as raised:
            load_data_config(write_yaml(tmp_path, tile=tile))
        assert message in str(raised.value) and "data.yaml" in str(raised.value)
