"""--cache disk: .npy beside the images, the same batches, reused across runs, rebuilt when stale."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from detect.config import Hyp
from detect.data import AugmentSettings, build_train_loader, load_data_config, load_split
from detect.data.images.disk_cache import disk_images, npy_path
from detect.data.images.load import load_resized
from detect.errors import UserError
from tests.data.helpers import simple_dataset

AUGMENT = AugmentSettings.from_hyp(dataclasses.replace(Hyp(), albumentations_p=0.0))


def _first_batch(config, cache: str | None) -> torch.Tensor:
    return next(iter(build_train_loader(config, AUGMENT, 64, 2, 0, seed=3, cache=cache, pin_memory=False))).images


def test_disk_cache_gives_the_same_batches_and_is_reused(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=4))
    plain = _first_batch(config, None)
    assert torch.equal(plain, _first_batch(config, "disk"))
    written = sorted((tmp_path / "images" / "train").glob("*.png.64.npy"))
    assert len(written) == 4  # the first batch's mosaics read every image of the four
    times = [path.stat().st_mtime_ns for path in written]
    assert torch.equal(plain, _first_batch(config, "disk"))
    assert [path.stat().st_mtime_ns for path in written] == times  # read, not rewritten


def test_a_stale_or_wrong_npy_is_rebuilt(tmp_path: Path) -> None:
    records = load_split(load_data_config(simple_dataset(tmp_path, count=2)), "train").records
    store = disk_images(records, 64, augment=True)
    image = str(records[0].path)
    expected = load_resized(Path(image), 64, augment=True)
    np.testing.assert_array_equal(store[0], expected)
    cached = npy_path(image, 64)
    np.save(cached, np.zeros((5, 5, 3), np.uint8))  # wrong shape (as another imgsz would give)
    np.testing.assert_array_equal(store[0], expected)
    np.save(cached, np.zeros_like(expected))  # right shape, but older than the image
    stamp = Path(image).stat().st_mtime_ns
    os.utime(cached, ns=(stamp - 10**9, stamp - 10**9))
    np.testing.assert_array_equal(store[0], expected)
    np.testing.assert_array_equal(np.load(cached), expected)
    Path(cached).write_bytes(b"not a npy")
    np.testing.assert_array_equal(store[0], expected)


def test_an_unknown_cache_is_one_clear_error(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=4))
    with pytest.raises(UserError, match="--cache gpu: choose one of ram, disk"):
        build_train_loader(config, AUGMENT, 64, 2, 0, seed=0, cache="gpu")


def test_disk_cache_refuses_in_one_line_when_the_disk_is_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=4))
    monkeypatch.setattr("detect.data.images.disk_cache.shutil.disk_usage", lambda folder: shutil._ntuple_diskusage(0, 0, 10))
    with pytest.raises(UserError, match="--cache disk needs .* GiB beside the 4 images at 64"):
        build_train_loader(config, AUGMENT, 64, 2, 0, seed=0, cache="disk")
