"""Caches at 2 ranks under torchrun, on a read-only dataset: the label cache written by one rank and loaded by the
other (in the user cache, then found again through --cache-dir), --cache ram filled once for the node, --cache disk's
.npy files in the cache folder; both caches train to the same weights."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from detect.data.storage.cache_places import CACHE_DIR_VARIABLE
from detect.training.resume import TrainingCheckpoint
from tests.training.helpers import tiny_dataset, train_args

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def torchrun(args: list[str], xdg: Path) -> str:
    """The output of two ranks of `python -m detect.train args` that succeeded, the user cache under `xdg`."""
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": str(xdg)}
    environ.pop(CACHE_DIR_VARIABLE, None)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "detect.train", *args], capture_output=True, text=True, env=environ, cwd=REPO,
                          timeout=600, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    return output


def weights(run: Path) -> dict[str, torch.Tensor]:
    return TrainingCheckpoint.load(run / "weights" / "last.pt").model["state_dict"]


def test_caches_of_a_read_only_dataset_at_two_ranks(tmp_path: Path) -> None:
    root = tmp_path / "data"
    data = tiny_dataset(root)
    folders = [root, *(root / kind for kind in ("images", "labels")), *(root / kind / "train" for kind in
                                                                         ("images", "labels"))]
    for folder in folders:  # no write bits: read-only, even for root (storage/cache_places.py, folder_writable)
        folder.chmod(0o555)
    try:
        ram = torchrun(train_args(data, tmp_path / "ram", "--cache", "ram"), tmp_path / "xdg")
        cache_dir = tmp_path / "xdg" / "detect"  # where the first run's default put the label cache
        disk = torchrun(train_args(data, tmp_path / "disk", "--cache", "disk", "--cache-dir", str(cache_dir)),
                        tmp_path / "other")
    finally:
        for folder in folders:
            folder.chmod(0o755)
    # The first run checks the labels once (rank 0 writes, rank 1 loads); val is the same folder, so its cache.
    assert "train labels: cache written on rank 0; loaded on rank 1" in ram
    assert "val labels: cache loaded on ranks 0, 1" in ram
    assert re.search(r"cached 8 images in RAM \([\d.]+ GiB, one copy for this node's 2 ranks\)", ram), ram[-3000:]
    # The second finds it through --cache-dir (its own user cache is empty): no rank checks again.
    assert "train labels: cache loaded on ranks 0, 1" in disk
    assert not (tmp_path / "other" / "detect").exists()
    assert len(list(cache_dir.glob("train-*.detect.cache"))) == 1
    (store,) = [path for path in cache_dir.glob("train-*") if path.is_dir()]
    assert f"--cache disk: .npy files in {cache_dir}" in disk
    assert len(list(store.glob("*.png.64.npy"))) == 8
    assert sorted(path.name for path in root.rglob("*") if path.is_file()) == sorted(
        [f"{index:03d}.{suffix}" for index in range(8) for suffix in ("png", "txt")] + ["data.yaml"])
    # The shared RAM buffer and the .npy files hold the same images: the same weights, bit for bit.
    ram_weights, disk_weights = weights(tmp_path / "ram" / "exp"), weights(tmp_path / "disk" / "exp")
    assert ram_weights.keys() == disk_weights.keys()
    assert all(torch.equal(ram_weights[name], disk_weights[name]) for name in ram_weights)
