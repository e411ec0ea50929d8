"""The label cache survives any corruption: a flipped bit anywhere gives the original arrays or a rebuild, never an
error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from detect.data import load_data_config, load_split
from detect.data.labels.cache import ARRAYS, read_cache
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
