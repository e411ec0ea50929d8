"""--cache disk: .npy beside the images (or in a cache folder), the same batches, reused across runs, rebuilt when
stale; --cache ram: one buffer that the ranks of a node fill together, or one each where /dev/shm cannot hold it."""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import shutil
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from detect.config import Hyp
from detect.data import AugmentSettings, TrainLoaderSettings, build_train_loader, load_data_config, load_split
from detect.data.images import ram_cache
from detect.data.images.disk_cache import disk_images, npy_path
from detect.data.images.load import load_resized
from detect.data.images.ram_cache import NodeShare, RamImages, cache_images, check_memory
from detect.data.storage.cache_places import CACHE_DIR_VARIABLE
from detect.data.storage.interface import Storage
from detect.errors import UserError
from tests.data.helpers import simple_dataset

AUGMENT = AugmentSettings.from_hyp(dataclasses.replace(Hyp(), albumentations_p=0.0))


def _first_batch(config, cache: str | None) -> torch.Tensor:
    return next(iter(build_train_loader(load_split(config, "train"),
                                        TrainLoaderSettings(AUGMENT, 64, 2, 0, seed=3, cache=cache,
                                                            pin_memory=False)))).images


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
    rebuilt = Path(cached).read_bytes()
    Path(cached).write_bytes(rebuilt.replace(b"), }", b"(, }", 1))  # numpy's header parser raises a TokenError
    np.testing.assert_array_equal(store[0], expected)


def test_an_unknown_cache_is_one_clear_error(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=4))
    with pytest.raises(UserError, match="--cache gpu: choose one of ram, disk"):
        build_train_loader(load_split(config, "train"), TrainLoaderSettings(AUGMENT, 64, 2, 0, seed=0, cache="gpu"))


def test_disk_cache_refuses_in_one_line_when_the_disk_is_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=4))
    monkeypatch.setattr("detect.data.images.disk_cache.shutil.disk_usage",
                        lambda folder: shutil._ntuple_diskusage(0, 0, 10))
    with pytest.raises(UserError, match="--cache disk needs .* GiB for the 4 images at 64 in "):
        build_train_loader(load_split(config, "train"), TrainLoaderSettings(AUGMENT, 64, 2, 0, seed=0, cache="disk"))


@pytest.mark.parametrize("where", ["read-only", "cache_dir"])
def test_npy_files_go_to_the_cache_folder(where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_data_config(simple_dataset(tmp_path / "data", count=4))
    images = tmp_path / "data" / "images" / "train"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(CACHE_DIR_VARIABLE, raising=False)
    plain = _first_batch(config, None)
    folder = tmp_path / "xdg" / "detect" if where == "read-only" else tmp_path / "flag"
    images.chmod(0o555 if where == "read-only" else 0o755)  # no write bits: read-only, even for root
    try:
        cache_dir = None if where == "read-only" else folder
        settings = TrainLoaderSettings(AUGMENT, 64, 2, 0, seed=3, cache="disk", pin_memory=False, cache_dir=cache_dir)
        batch = next(iter(build_train_loader(load_split(config, "train", cache_dir=cache_dir), settings)))
    finally:
        images.chmod(0o755)
    assert torch.equal(plain, batch.images)
    (store,) = [path for path in folder.glob("train-*") if path.is_dir()]  # beside the label cache with cache_dir
    assert len(list(store.glob("*.png.64.npy"))) == 4 and not list(images.glob("*.npy"))


def _two_ranks(records, shared_memory: Path) -> list[RamImages | None]:
    """cache_images as the two ranks of one node run it (as threads, with a barrier of their own)."""
    barrier, name, found = threading.Barrier(2), uuid.uuid4().hex, [None, None]

    def rank(local_rank: int) -> None:
        share = NodeShare(local_rank, 2, lambda _: barrier.wait(timeout=60), name)
        found[local_rank] = cache_images(records, 64, augment=True, share=share)

    ranks = [threading.Thread(target=rank, args=(local_rank,)) for local_rank in range(2)]
    for thread in ranks:
        thread.start()
    for thread in ranks:
        thread.join()
    assert not list(shared_memory.glob(f"*{name}*"))  # unlinked once both mapped it
    return found


@pytest.mark.parametrize("shared", [True, False])
def test_the_ranks_of_a_node_fill_one_ram_buffer(shared: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    records = load_split(load_data_config(simple_dataset(tmp_path, count=5)), "train").records
    alone = cache_images(records, 64, augment=True)
    shared_memory = tmp_path / ("shm" if shared else "no shm")  # the real /dev/shm in the torchrun test
    shared_memory.mkdir(exist_ok=not shared)
    monkeypatch.setattr(ram_cache, "SHARED_MEMORY", shared_memory if shared else tmp_path / "missing")
    decoded, lock = collections.Counter(), threading.Lock()

    def counted(path: Path, imgsz: int, augment: bool, storage: Storage) -> np.ndarray:
        with lock:
            decoded[path.name] += 1
        return load_resized(path, imgsz, augment, storage)

    monkeypatch.setattr(ram_cache, "load_resized", counted)
    with caplog.at_level(logging.INFO):
        found = _two_ranks(records, shared_memory)
    assert all(images is not None and np.array_equal(images.buffer, alone.buffer) for images in found)
    assert sorted(decoded.values()) == [1 if shared else 2] * 5  # once by one rank, or by each
    assert ("one copy for this node's 2 ranks" in caplog.text) == shared
    assert ("each rank of this node decodes and holds its own copy" in caplog.text) != shared


def test_ram_copies_for_every_rank_must_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = load_split(load_data_config(simple_dataset(tmp_path, count=4)), "train").records
    one_copy = int(cache_images(records, 64, augment=True).buffer.nbytes)
    monkeypatch.setattr(ram_cache, "available_memory", lambda: int(1.5 * one_copy / ram_cache.MEMORY_SHARE))
    check_memory(records, 64)
    with pytest.raises(UserError, match=r"--cache ram needs .* \(2 copies: /dev/shm cannot hold one"):
        check_memory(records, 64, copies=2)
