"""A split in a bucket (moto's S3 server on 127.0.0.1): listed and checked once, its label cache and listing kept
locally, a changed object seen; the three errors a user meets first, one line each."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import time
from pathlib import Path

import pytest
import torch

from detect.config import Hyp
from detect.data import AugmentSettings, TrainLoaderSettings, build_train_loader, load_data_config, load_split
from detect.data.storage import bucket_client
from detect.data.storage.bucket import LISTING_TTL_VARIABLE
from detect.data.storage.fetch_ahead import FetchAhead
from detect.errors import UserError
from tests.training.helpers import tiny_dataset


@pytest.fixture
def bucket_yaml(s3_environ, tmp_path: Path) -> Path:
    """A tiny dataset (8 images, one of them without labels) in s3://tiny-<test>/sets/tiny; its data yaml (local)."""
    data = tiny_dataset(tmp_path / "tiny")
    (data.parent / "labels" / "train" / "007.txt").unlink()
    bucket = f"tiny-{abs(hash(tmp_path.name)) % 10**8}"
    s3_environ.upload(data.parent, bucket, "sets/tiny")
    yaml = tmp_path / "bucket.yaml"
    yaml.write_text(data.read_text().replace(f"path: {data.parent}", f"path: s3://{bucket}/sets/tiny"))
    assert "s3://" in yaml.read_text()
    return yaml


def test_listing_and_label_check_run_once_with_their_cache_kept_locally(bucket_yaml, s3_environ, tmp_path,
                                                                          monkeypatch):
    config = load_data_config(bucket_yaml)
    bucket = config.remote.split("/")[2]
    cache_dir = tmp_path / "cache"
    first = load_split(config, "train", cache_dir=cache_dir)
    assert first.cache_state == "written"
    assert (first.counts["found"], first.counts["usable"], first.counts["background: missing label file"]) == (8, 8, 1)
    # Listed once; every image and the 7 label files read once, into the mirror folder under --cache-dir.
    assert (s3_environ.lists(bucket), s3_environ.gets(bucket)) == (1, 15)
    paths = [str(record.path) for record in first.records]
    assert all(path.startswith(str(cache_dir / "remote" / "objects")) for path in paths)
    assert paths[0].endswith("sets/tiny/images/train/000.png")
    # A new process: the listing (kept for DETECT_REMOTE_LISTING_TTL) and the label cache are found locally.
    second = load_split(config, "train", cache_dir=cache_dir)
    assert second.cache_state == "loaded"
    assert (s3_environ.lists(bucket), s3_environ.gets(bucket)) == (1, 15)
    assert [str(record.path) for record in second.records] == paths
    # A label changed in the bucket: the next listing sees it, the label is read again and the split checked again.
    s3_environ.client().put_object(Bucket=bucket, Key="sets/tiny/labels/train/000.txt", Body=b"2 0.5 0.5 0.2 0.2\n")
    monkeypatch.setenv(LISTING_TTL_VARIABLE, "0")
    third = load_split(config, "train", cache_dir=cache_dir)
    assert third.cache_state == "written"
    assert s3_environ.lists(bucket) == 2
    assert s3_environ.gets(bucket) == 16  # the changed label only: the images were kept
    assert third.records[0].classes.tolist() == [2]


def test_training_batches_from_the_bucket_are_the_local_ones(bucket_yaml, tmp_path):
    """A batch's samples made in threads (FetchAhead), each image fetched on first read, are the samples that one
    thread makes from the local copy: mosaic, warp, albumentations and all, bit for bit."""
    augment = AugmentSettings.from_hyp(dataclasses.replace(Hyp(), albumentations_p=0.5))
    settings = TrainLoaderSettings(augment, 64, 4, 0, seed=3, pin_memory=False, cache_dir=tmp_path / "cache")
    loaders = [build_train_loader(load_split(load_data_config(yaml), "train", cache_dir=tmp_path / "cache"), settings)
               for yaml in (tmp_path / "tiny" / "data.yaml", bucket_yaml)]
    assert isinstance(loaders[1].dataset, FetchAhead) and not isinstance(loaders[0].dataset, FetchAhead)
    for epoch in (0, 1):
        for loader in loaders:
            loader.set_epoch(epoch)
        for local, remote in zip(*loaders, strict=True):
            assert torch.equal(local.images, remote.images)
            assert torch.equal(local.targets, remote.targets)
            assert [Path(path).name for path in local.paths] == [Path(path).name for path in remote.paths]


def test_a_worker_fetches_its_next_batch_of_this_ranks_shard_ahead(bucket_yaml, tmp_path):
    """Rank 0 of 2, no mosaic (a sample reads its own image only): after its first batch, the disk cache holds that
    batch's images and those of its next batch, fetched ahead, and nothing of rank 1's shard."""
    config, cache_dir = load_data_config(bucket_yaml), tmp_path / "cache"
    checked = load_split(config, "train", cache_dir=cache_dir)
    objects = next((cache_dir / "remote" / "objects").iterdir())
    shutil.rmtree(objects)  # the check fetched every image: start from an empty cache
    augment = AugmentSettings.from_hyp(dataclasses.replace(Hyp(), mosaic=0.0, albumentations_p=0.0))
    loader = build_train_loader(checked,
                                TrainLoaderSettings(augment, 64, 2, 0, seed=1, rank=0, world_size=2, pin_memory=False,
                                                    cache_dir=cache_dir))
    loader.set_epoch(0)
    first = next(iter(loader))
    batches = loader.sampler.batches.of_epoch(0)
    expected = {Path(os.fsdecode(loader.records.paths[index])).name for batch in batches[:2] for index in batch}
    assert {Path(path).name for path in first.paths} < expected and len(expected) == 4
    deadline = time.monotonic() + 10
    while {path.name for path in objects.rglob("*.png")} != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {path.name for path in objects.rglob("*.png")} == expected


def test_a_split_the_bucket_does_not_hold_is_one_line(bucket_yaml, tmp_path):
    config = load_data_config(bucket_yaml)
    config = type(config)(**{**config.__dict__, "splits": {"train": (config.root / "images" / "nothing",)}})
    with pytest.raises(UserError, match=r"sets/tiny/images/nothing: no such image folder or image list in the bucket"):
        load_split(config, "train", cache_dir=tmp_path / "cache")


def test_a_cache_folder_that_cannot_be_written_is_one_line(bucket_yaml, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(UserError, match=r"s3://tiny-\d+/sets/tiny: cannot keep its files in .*file/remote \(.*\); "
                                        r"--cache-dir or \$DETECT_CACHE_DIR can name a writable folder"):
        load_split(load_data_config(bucket_yaml), "train", cache_dir=tmp_path / "file")


def _free_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return free.getsockname()[1]


@pytest.mark.parametrize("problem", ["wrong keys", "missing bucket", "unreachable endpoint"])
def test_errors_are_one_line(problem, bucket_yaml, tmp_path, monkeypatch):
    if problem == "wrong keys":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        expected = r"s3://tiny-\d+/sets/tiny: access denied at http://127.0.0.1:\d+ \(.*\): check AWS_ACCESS_KEY_ID"
    elif problem == "missing bucket":
        bucket_yaml.write_text(bucket_yaml.read_text().replace("s3://tiny-", "s3://none-"))
        expected = r"s3://none-\d+/sets/tiny: no bucket 'none-\d+' at http://127.0.0.1:\d+ \(check the data yaml's"
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
        monkeypatch.setattr(bucket_client, "ATTEMPTS", 1)  # a user's three tries of each call take 5 s
        expected = r"s3://tiny-\d+/sets/tiny: cannot reach http://127.0.0.1:\d+ \(EndpointConnectionError\); check "
    with pytest.raises(UserError, match=expected) as raised:
        load_split(load_data_config(bucket_yaml), "train", cache_dir=tmp_path / "cache")
    assert "\n" not in str(raised.value)
