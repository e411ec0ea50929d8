"""The training loader on tiles: windows are its samples, their pixels the image's crop whether decoded or read from
--cache ram or disk (at full resolution), rect batches, and a DDP rank's share of the windows."""

from __future__ import annotations

import numpy as np
import pytest

from detect.data import TrainLoaderSettings, build_train_loader, load_data_config, load_split
from detect.data.images.load import read_image
from detect.data.tiles.images import WindowImages
from detect.data.tiles.windows import TileSettings
from tests.data.helpers import STILL, write_sample, write_yaml

TILES = TileSettings(128, 0.25, empty_rate=0.0)


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """Two large-ish images (300x400, 200x150) with small boxes, checked."""
    root = tmp_path_factory.mktemp("tiles")
    write_sample(root, "train", "a", 300, 400, [(10, 10, 40, 40), (90, 50, 120, 70), (200, 200, 260, 290)])
    write_sample(root, "train", "b", 200, 150, [(10, 10, 30, 30)])
    return load_split(load_data_config(write_yaml(root)), "train")


def settings(**changes) -> TrainLoaderSettings:
    return TrainLoaderSettings(STILL, 64, 2, 0, pin_memory=False, tiles=TILES, **changes)


@pytest.mark.parametrize("cache", ["ram", "disk"])
def test_window_pixels_are_the_image_crop_decoded_or_cached(split, cache, tmp_path):
    decoded = build_train_loader(split, settings())
    cached = build_train_loader(split, settings(cache=cache, cache_dir=tmp_path))
    assert isinstance(decoded.dataset.cached, WindowImages) and decoded.dataset.cached.images is None
    assert cached.dataset.cached.images is not None
    for index in range(len(decoded.dataset)):
        assert np.array_equal(decoded.dataset.cached[index], cached.dataset.cached[index])
    store = decoded.dataset.cached
    x1, y1, x2, y2 = store.crops[0]
    image = read_image(split.records[int(store.sources[0])].path)
    assert store[0].shape == (64, 64, 3)  # the 128 px window resized to imgsz, as a training image is
    assert np.array_equal(store.take(np.array([0])).crops, store.crops[:1]) and (x2 - x1, y2 - y1) == (128, 128)
    assert image[y1:y2, x1:x2].shape == (128, 128, 3)


def test_the_loader_samples_windows_and_its_records_are_theirs(split):
    loader = build_train_loader(split, settings())
    assert len(loader.records) == len(loader.dataset) == 7  # 5 windows of a with a box, 2 of b (empty ones dropped)
    assert {(record.width, record.height) for record in loader.records} == {(128, 128)}
    batch = next(iter(loader))
    assert tuple(batch.images.shape) == (2, 3, 64, 64)
    assert len(batch.targets) and ((batch.targets[:, 2:] >= 0) & (batch.targets[:, 2:] <= 1)).all()
    assert split.counts["usable"] == 2  # the label check stays per image


def test_rect_batches_and_two_ranks_share_the_windows(split):
    rect = build_train_loader(split, settings(rect=True))
    assert [tuple(batch.images.shape[2:]) for batch in rect] == [(64, 64)] * 4  # 7 windows: 4 aspect batches
    shares = [build_train_loader(split, settings(world_size=2, rank=rank)) for rank in (0, 1)]
    keys = [set(share.epoch_indices()) for share in shares]
    assert len(keys[0]) == len(keys[1]) == 2 and not keys[0] & keys[1]  # 7 windows: 3 each, drop_last at batch 2
