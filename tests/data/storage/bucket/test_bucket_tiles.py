"""Tiles of a split in a bucket (moto's S3 server on 127.0.0.1): the same windows, pixels and labels as the same
files in a folder, at one process and for each of 2 ranks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from detect.data import TrainLoaderSettings, build_train_loader, load_data_config, load_split
from detect.data.tiles.windows import TileSettings
from tests.data.helpers import STILL, write_sample, write_yaml

TILES = TileSettings(128, 0.25, empty_rate=0.0)


@pytest.fixture
def folder_and_bucket(s3_environ, tmp_path):
    """Two images larger than a window with small boxes, as a folder's data yaml and a bucket's."""
    root = tmp_path / "large"
    write_sample(root, "train", "a", 300, 400, [(10, 10, 40, 40), (90, 50, 120, 70), (200, 200, 260, 290)])
    write_sample(root, "train", "b", 200, 150, [(10, 10, 30, 30)])
    local = write_yaml(root)
    bucket = f"tiles-{abs(hash(tmp_path.name)) % 10**8}"
    s3_environ.upload(root, bucket, "large")
    remote = tmp_path / "bucket.yaml"
    remote.write_text(local.read_text().replace(f"path: {root}", f"path: s3://{bucket}/large"))
    assert "s3://" in remote.read_text()
    return local, remote


def batches(yaml, cache_dir, **changes) -> list[tuple[torch.Tensor, torch.Tensor]]:
    split = load_split(load_data_config(yaml), "train", cache_dir=cache_dir)
    loader = build_train_loader(split, TrainLoaderSettings(STILL, 64, 2, 0, pin_memory=False, tiles=TILES, **changes))
    return [(batch.images, batch.targets) for batch in loader]


@pytest.mark.parametrize("rank", [None, 0, 1])
def test_a_bucket_splits_windows_are_the_folders(folder_and_bucket, tmp_path, rank):
    local, remote = folder_and_bucket
    ranks = {} if rank is None else {"rank": rank, "world_size": 2}
    from_folder = batches(local, tmp_path / "local-cache", **ranks)
    from_bucket = batches(remote, tmp_path / "bucket-cache", **ranks)
    assert len(from_bucket) == len(from_folder) == (3 if rank is None else 1)  # 7 windows with a box, batches of 2
    for (images, targets), (bucket_images, bucket_targets) in zip(from_folder, from_bucket):
        assert torch.equal(images, bucket_images) and torch.equal(targets, bucket_targets)
    assert all(len(targets) for _, targets in from_bucket)
    assert np.any([images.any() for images, _ in from_bucket])  # the boxes' white pixels reached the batch
