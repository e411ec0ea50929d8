"""Fidelity to yolov5's sampling: the own image takes a random mosaic quadrant; mixup blends two mosaics only."""

from __future__ import annotations

import dataclasses

import pytest

from detect.data.augment import transforms as augment
from tests.data.helpers import SIZE, STILL, RecordingDataset


def test_own_image_takes_every_mosaic_quadrant() -> None:
    dataset = RecordingDataset(200, dataclasses.replace(STILL, mosaic=1.0))
    # With no warp the output shows the canvas around the mosaic centre: its top-left pixel is quadrant 0's
    # image, its bottom-right pixel quadrant 3's, and so on (the image value is the record's index).
    corners = {0: (0, 0), 1: (0, SIZE - 1), 2: (SIZE - 1, 0), 3: (SIZE - 1, SIZE - 1)}
    own_in_slot = dict.fromkeys(corners, 0)
    samples = 200
    for index in range(samples):
        image = dataset[(0, index)].image[0]
        for slot, (row, column) in corners.items():
            own_in_slot[slot] += int(image[row, column]) == index
    assert all(count > samples / 8 for count in own_in_slot.values()), own_in_slot  # about 1/4 each
    assert own_in_slot[0] < samples / 2, own_in_slot


def test_mixup_blends_a_mosaic_with_a_mosaic_only(monkeypatch: pytest.MonkeyPatch) -> None:
    blends = []
    real_mixup = augment.mixup
    monkeypatch.setattr(augment, "mixup", lambda *args: blends.append(1) or real_mixup(*args))
    dataset = RecordingDataset(50, dataclasses.replace(STILL, mosaic=0.5, mixup=1.0))
    loads_per_sample = []
    for index in range(40):
        dataset.loads.clear()
        dataset[(0, index)]
        loads_per_sample.append(len(dataset.loads))
    # a letterboxed sample loads one image and is never mixed; a mosaic (4 loads) always takes a mosaic partner (4)
    assert set(loads_per_sample) == {1, 8}, loads_per_sample
    assert len(blends) == loads_per_sample.count(8)


def test_no_mixup_without_mosaic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(augment, "mixup", lambda *args: pytest.fail("mixup of a non-mosaic sample"))
    dataset = RecordingDataset(20, dataclasses.replace(STILL, mosaic=0.0, mixup=1.0))
    for index in range(20):
        dataset.loads.clear()
        dataset[(0, index)]
        assert dataset.loads == [index]
