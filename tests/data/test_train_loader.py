"""Training loader: fixed shapes, seeded shuffles, disjoint covering shards, same batches for any worker count."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from detect.config import Hyp
from detect.data import AugmentSettings, TrainLoaderSettings, build_train_loader, load_data_config, load_split
from detect.data.batch import TARGET_BUCKET
from detect.errors import UserError
from tests.data.helpers import simple_dataset

AUGMENT = AugmentSettings.from_hyp(dataclasses.replace(Hyp(), albumentations_p=0.0))


def _indices(loader) -> list[int]:
    return loader.epoch_indices()


def test_batches_have_one_shape_and_consistent_targets(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=10))
    loader = build_train_loader(load_split(config, "train"),
                                TrainLoaderSettings(AUGMENT, 96, 4, 0, seed=0, pin_memory=False))
    batches = list(loader)
    assert len(batches) == len(loader) == 2  # drop_last: 10 images -> 2 full batches of 4
    for batch in batches:
        assert batch.images.shape == (4, 3, 96, 96) and batch.images.dtype == torch.uint8
        assert batch.padded_targets.shape == (4, TARGET_BUCKET, 5)
        assert int(batch.target_counts.sum()) == len(batch.targets)
        assert ((batch.targets[:, 2:] >= 0) & (batch.targets[:, 2:] <= 1)).all()
        for index in range(4):
            rows = batch.targets[batch.targets[:, 0] == index, 1:]
            assert torch.equal(batch.padded_targets[index, :len(rows)], rows)


def test_shuffle_is_seeded_by_seed_and_epoch(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=12))
    first = build_train_loader(load_split(config, "train"),
                               TrainLoaderSettings(AUGMENT, 64, 2, 0, seed=5, pin_memory=False))
    second = build_train_loader(load_split(config, "train"),
                                TrainLoaderSettings(AUGMENT, 64, 2, 0, seed=5, pin_memory=False))
    assert _indices(first) == _indices(second)
    order_zero = _indices(first)
    first.set_epoch(1)
    assert _indices(first) != order_zero and sorted(_indices(first)) == sorted(order_zero)


def test_distributed_shards_are_disjoint_and_cover(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=12))
    for epoch in (0, 3):
        shards = []
        for rank in range(3):
            loader = build_train_loader(load_split(config, "train"),
                                        TrainLoaderSettings(AUGMENT, 64, 2, 0, seed=1, rank=rank, world_size=3,
                                                            pin_memory=False))
            loader.set_epoch(epoch)
            shards.append(_indices(loader))
        flat = [index for shard in shards for index in shard]
        assert sorted(flat) == list(range(12)) and all(len(shard) == 4 for shard in shards)


def test_worker_count_does_not_change_the_batches(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=4))
    batches = []
    for workers in (0, 1):
        loader = build_train_loader(load_split(config, "train"),
                                    TrainLoaderSettings(AUGMENT, 64, 2, workers, seed=2, pin_memory=False))
        loader.set_epoch(1)
        batches.append(next(iter(loader)))
    assert torch.equal(batches[0].images, batches[1].images)
    assert torch.equal(batches[0].targets, batches[1].targets)


def test_too_few_images_for_a_batch_is_a_user_error(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=3))
    with pytest.raises(UserError, match="fewer than batch size"):
        build_train_loader(load_split(config, "train"), TrainLoaderSettings(AUGMENT, 64, 4, 0, seed=0))


def test_ram_cache_gives_the_same_batches(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=4))
    plain = next(iter(build_train_loader(load_split(config, "train"),
                                         TrainLoaderSettings(AUGMENT, 64, 2, 0, seed=3, pin_memory=False))))
    cached = next(iter(build_train_loader(load_split(config, "train"),
                                          TrainLoaderSettings(AUGMENT, 64, 2, 0, seed=3, cache="ram",
                                                              pin_memory=False))))
    assert torch.equal(plain.images, cached.images)


def test_ram_cache_refuses_when_memory_is_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=4))
    monkeypatch.setattr("detect.data.images.ram_cache.available_memory", lambda: 1000)
    with pytest.raises(UserError, match="--cache ram needs"):
        build_train_loader(load_split(config, "train"), TrainLoaderSettings(AUGMENT, 64, 2, 0, seed=0, cache="ram"))


def test_single_class_checks_against_the_yaml_then_makes_every_box_class_0(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path))  # classes 0 and 1 of names a, b, c
    split = load_split(config, "train", single_class=True)
    multi = load_split(config, "train")
    assert split.names == ["item"] and split.coco_json is None and split.category_ids is None
    assert sum(len(r.classes) for r in split.records) == sum(len(r.classes) for r in multi.records) > 0
    assert all((record.classes == 0).all() for record in split.records)
    assert any((record.classes > 0).any() for record in multi.records)


def test_rect_batches_have_one_aspect_shape_each_and_split_over_ranks(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=9))  # 120-160 high, 160-250 wide
    shards = [build_train_loader(load_split(config, "train"),
                                 TrainLoaderSettings(AUGMENT, 128, 2, 0, seed=0, rank=rank, world_size=2, rect=True))
              for rank in (0, 1)]
    seen, heights = [], []
    for loader in shards:
        loader.set_epoch(3)
        batches = list(loader)
        assert len(batches) == len(loader) == 2  # 5 aspect batches of 2 (the last of 1), 2 whole ones per rank
        for batch in batches:
            height, width = batch.images.shape[2:]
            assert height % 32 == 0 and height <= width == 128  # no image is taller than wide
            heights.append(height)
            assert batch.targets.numel() and 0 <= batch.targets[:, 2:].min() and batch.targets[:, 2:].max() <= 1
        seen += [path for batch in batches for path in batch.paths]
    assert len(seen) == len(set(seen)) and min(heights) < 128
