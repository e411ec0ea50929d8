"""The label cache survives any corruption (a flipped bit anywhere gives the original arrays or a rebuild, never an
error), and a read-only dataset keeps its cache in a cache folder: checked once, not at every start."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from detect.data import load_data_config, load_split
from detect.data.__main__ import main as data_main
from detect.data.data_config import DataConfig
from detect.data.labels.cache import ARRAYS, read_cache
from detect.data.storage.cache_places import CACHE_DIR_VARIABLE
from tests.data.helpers import simple_dataset, write_sample

FLIPS = 400


def test_no_single_bit_flip_raises_or_gives_other_arrays(tmp_path: Path) -> None:
    simple_dataset(tmp_path)
    (tmp_path / "labels" / "train" / "0001.txt").write_text("7 0.5 0.5 0.2 0.2\n")  # a problem, so the list is stored
    write_sample(tmp_path, "train", "extra", 50, 60, [(5, 5, 20, 30)])
    load_split(load_data_config(tmp_path / "data.yaml"), "train")
    source = tmp_path / "labels" / "train.detect.cache"
    original = source.read_bytes()
    with np.load(source, allow_pickle=False) as data:
        key = str(data["key"])
    expected = read_cache(source, key)
    assert expected is not None and expected.problems
    rng = np.random.default_rng(36)
    corrupt, kept = tmp_path / "corrupt.detect.cache", 0
    for bit in rng.integers(0, len(original) * 8, FLIPS):
        flipped = bytearray(original)
        flipped[bit // 8] ^= 1 << (bit % 8)
        corrupt.write_bytes(flipped)
        found = read_cache(corrupt, key)  # must not raise
        if found is not None:
            kept += 1
            for name in ARRAYS:
                got, want = getattr(found, name), getattr(expected, name)
                assert got.dtype == want.dtype and np.array_equal(got, want), f"bit {bit}: {name} differs"
            assert json.dumps(found.problems) == json.dumps(expected.problems), f"bit {bit}: problems differ"
    assert kept < FLIPS  # most flips are caught


@pytest.fixture
def read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DataConfig]:
    """A dataset (one label with a problem, so a details file) whose folders have no write bits, which
    folder_writable counts read-only even for root; the user cache in tmp_path/xdg, no DETECT_CACHE_DIR."""
    root = tmp_path / "data"
    simple_dataset(root)
    (root / "labels" / "train" / "0001.txt").write_text("7 0.5 0.5 0.2 0.2\n")
    folders = [root, root / "labels", root / "labels" / "train", root / "images", root / "images" / "train"]
    for folder in folders:
        folder.chmod(0o555)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(CACHE_DIR_VARIABLE, raising=False)
    yield load_data_config(root / "data.yaml")
    for folder in folders:
        folder.chmod(0o755)


@pytest.mark.parametrize("where", ["user cache", CACHE_DIR_VARIABLE, "cache_dir"])
def test_a_read_only_dataset_is_checked_once(where: str, read_only: DataConfig, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    folder = {"user cache": tmp_path / "xdg" / "detect", CACHE_DIR_VARIABLE: tmp_path / "env",
              "cache_dir": tmp_path / "flag"}[where]
    if where != "user cache":
        monkeypatch.setenv(CACHE_DIR_VARIABLE, str(tmp_path / "env"))  # --cache-dir (cache_dir) wins over it
    cache_dir = folder if where == "cache_dir" else None
    with caplog.at_level(logging.INFO):
        first = load_split(read_only, "train", cache_dir=cache_dir)
        assert "cache written" in caplog.text and "not writable" not in caplog.text
        caplog.clear()
        second = load_split(read_only, "train", cache_dir=cache_dir)
        assert "cache loaded" in caplog.text
    assert first.cache_state == "written" and second.cache_state == "loaded" and len(second.records) == 7
    (cache,) = folder.glob("train-*.detect.cache")
    assert second.details_file == cache.with_suffix(".problems.txt") and "0001.txt" in cache.with_suffix(
        ".problems.txt").read_text()
    assert sorted(path.name for path in (tmp_path / "data" / "labels").iterdir()) == ["train"]  # nothing beside


def test_datasets_sharing_a_cache_folder_keep_their_own_files(read_only: DataConfig, tmp_path: Path) -> None:
    other = load_data_config(simple_dataset(tmp_path / "other", count=2))  # the same folder names, writable
    load_split(read_only, "train")
    load_split(other, "train", cache_dir=tmp_path / "xdg" / "detect")
    names = sorted(path.name for path in (tmp_path / "xdg" / "detect").glob("*.detect.cache"))
    assert len(names) == 2 and all(name.startswith("train-") for name in names)
    assert len(load_split(other, "train", cache_dir=tmp_path / "xdg" / "detect").records) == 2


def test_no_writable_cache_folder_warns_and_runs_without_cache(read_only: DataConfig, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "xdg" / "detect").mkdir(parents=True)
    (tmp_path / "xdg" / "detect").chmod(0o555)
    with caplog.at_level(logging.WARNING):
        split = load_split(read_only, "train")
    assert "not writable" in caplog.text and split.cache_state == "not written" and len(split.records) == 7
    assert not list((tmp_path / "xdg" / "detect").iterdir())


def test_the_data_cli_takes_cache_dir(tmp_path: Path) -> None:
    data = simple_dataset(tmp_path / "data", count=2)
    assert data_main(["--data", str(data), "--cache-dir", str(tmp_path / "caches")]) == 0
    assert len(list((tmp_path / "caches").glob("train-*.detect.cache"))) == 1
    assert not list((tmp_path / "data").rglob("*.detect.cache"))
