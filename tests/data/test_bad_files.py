"""A file that breaks during a run never kills it: training substitutes another image, validation a placeholder."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from detect.config import Hyp
from detect.data import (
    AugmentSettings,
    Sample,
    TrainLoaderSettings,
    ValLoaderSettings,
    build_train_loader,
    build_val_loader,
    collate,
    load_data_config,
    load_split,
)
from detect.data.images.letterbox import PAD_VALUE
from detect.errors import UserError
from tests.data.helpers import STILL, RecordingDataset, write_sample, write_yaml

AUGMENT = AugmentSettings.from_hyp(dataclasses.replace(Hyp(), albumentations_p=0.0))  # mosaic on


def _jpeg_dataset(root: Path, count: int = 6) -> tuple[Path, Path]:
    """(data yaml, the image that the test will break): JPEGs of two sizes, one box each."""
    for index in range(count):
        height = 48 if index % 2 else 64
        write_sample(root, "train", f"{index:02d}", height, 64, [(8, 8, 40, 32)], suffix=".jpg")
    return write_yaml(root), root / "images" / "train" / "03.jpg"


def _truncate(image: Path) -> None:
    """Cut a checked JPEG to a few bytes: no decoder can read it any more."""
    image.write_bytes(image.read_bytes()[:8])


def test_train_loader_substitutes_an_image_truncated_after_the_check(tmp_path: Path) -> None:
    source, broken = _jpeg_dataset(tmp_path)
    loader = build_train_loader(load_split(load_data_config(source), "train"),
                                TrainLoaderSettings(AUGMENT, 64, 2, 1, seed=0, pin_memory=False))
    _truncate(broken)  # after the label check
    batches = list(loader)  # in a real worker process
    assert len(batches) == 3 and all(batch.images.shape == (2, 3, 64, 64) for batch in batches)
    problems = [line for batch in batches for line in batch.problems]
    assert problems and all(line.startswith(f"{broken}: ") for line in problems), problems
    assert str(broken) not in [path for batch in batches for path in batch.paths]
    assert not any(batch.unusable_ids for batch in batches)


def test_val_loader_gives_a_placeholder_for_an_image_truncated_after_the_check(tmp_path: Path) -> None:
    source, broken = _jpeg_dataset(tmp_path)
    config = load_data_config(source)
    intact = list(build_val_loader(load_split(config, "val"), ValLoaderSettings(64, 4, 0, pin_memory=False)))
    loader = build_val_loader(load_split(config, "val"), ValLoaderSettings(64, 4, 1, pin_memory=False))
    broken_id = next(record.image_id for record in loader.records if record.path == broken)
    _truncate(broken)
    batches = list(loader)
    assert [batch.images.shape for batch in batches] == [batch.images.shape for batch in intact]  # shapes stay
    assert [batch.unusable_ids for batch in batches] == [(broken_id,) if broken_id in batch.image_ids else ()
                                                         for batch in batches]
    number = next(number for number, batch in enumerate(batches) if batch.unusable_ids)
    batch, position = batches[number], batches[number].image_ids.index(broken_id)
    assert (batch.images[position] == PAD_VALUE).all()
    assert int(batch.target_counts[position]) == 0 and not (batch.targets[:, 0] == position).any()
    assert batch.letterbox[position] == intact[number].letterbox[position]  # the way back stays defined
    assert len(batch.problems) == 1 and batch.problems[0].startswith(f"{broken}: ")
    assert sum(len(batch.problems) for batch in batches) == 1


def test_failing_mosaic_tiles_are_replaced_reproducibly() -> None:
    broken = frozenset({1, 2})
    dataset = RecordingDataset(8, dataclasses.replace(STILL, mosaic=1.0), broken)
    twin = RecordingDataset(8, dataclasses.replace(STILL, mosaic=1.0), broken)
    seen_problems = 0
    for index in range(8):
        dataset.loads.clear()
        sample = dataset[(0, index)]
        failures = sum(load in broken for load in dataset.loads)
        assert len(sample.problems) == failures and len(dataset.loads) == 4 + failures
        assert all(line in ("1.png: RuntimeError: decoder failed", "2.png: RuntimeError: decoder failed")
                   for line in sample.problems)
        assert sample.usable and sample.path not in ("1.png", "2.png")
        again = twin[(0, index)]  # the substitutes come from the sample's own generator
        np.testing.assert_array_equal(again.image, sample.image)
        assert again.problems == sample.problems
        seen_problems += failures
    assert seen_problems >= 2


def test_a_dataset_that_fails_again_and_again_is_a_user_error() -> None:
    dataset = RecordingDataset(4, STILL, broken=frozenset(range(4)))
    with pytest.raises(UserError, match=r"10 images in a row .*\d\.png.*looks broken"):
        dataset[(0, 0)]
    assert len(dataset.loads) == 10


def _sample(image_id: int, problems: tuple[str, ...] = (), usable: bool = True) -> Sample:
    return Sample(image=np.zeros((3, 8, 8), np.uint8), labels=np.zeros((0, 5), np.float32), path=f"{image_id}.jpg",
                  image_id=image_id, problems=problems, usable=usable)


def test_collate_gathers_problems_and_unusable_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = [_sample(5, ("a.jpg: x", "b.jpg: y")), _sample(6, ("6.jpg: z",), usable=False), _sample(7)]
    batch = collate(samples)
    assert batch.problems == ("a.jpg: x", "b.jpg: y", "6.jpg: z") and batch.unusable_ids == (6,)
    # the DataLoader's pin-memory thread calls Batch.pin_memory; pinning needs an accelerator, so stand in for it
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda tensor: tensor.clone())
    pinned = batch.pin_memory()
    assert (pinned.problems, pinned.unusable_ids, pinned.image_ids) == (batch.problems, (6,), (5, 6, 7))
