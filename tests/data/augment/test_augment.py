"""Boxes survive the CPU augmentations: a box drawn into the image is still where its label says (within a pixel)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

from detect.config import load_hyp
from detect.data import AugmentSettings, load_data_config, load_split
from detect.data.augment import transforms as augment
from detect.data.augment.albument import build_albumentations
from detect.data.augment.mosaic import mosaic4
from detect.data.datasets import TrainDataset
from detect.data.images.letterbox import letterbox
from tests.data.helpers import (
    STILL,
    box_image,
    simple_dataset,
    white_extent,
    write_sample,
    write_yaml,
)


def _one_box_labels(box: tuple[int, int, int, int]) -> np.ndarray:
    return np.array([[0, *box]], np.float32)


@pytest.mark.parametrize("degrees,translate,scale,shear", [(0, 0.1, 0.5, 0), (0, 0.2, 0.3, 0), (30, 0.1, 0.2, 0)])
def test_random_warp_moves_the_box_with_the_pixels(degrees: float, translate: float, scale: float, shear: float) -> None:
    box = (60, 50, 130, 110)
    rng, checked = np.random.default_rng(3), 0
    for _ in range(5):
        image, labels = augment.random_warp(box_image(200, 240, [box]), _one_box_labels(box), rng,
                                            augment.Warp(degrees, translate, scale, shear, 0.0))
        extent = white_extent(image)
        if extent is None or len(labels) == 0:
            continue
        tolerance = 1.0 if degrees == 0 else 2.0  # rotated corners land between pixels on both sides
        np.testing.assert_allclose(labels[0, 1:], extent, atol=tolerance)
        checked += 1
    assert checked >= 3


def test_flips_mirror_boxes() -> None:
    box = (10, 20, 50, 70)
    image = box_image(100, 120, [box])
    flipped, labels = augment.flip(image, _one_box_labels(box), horizontal=True)
    assert white_extent(flipped) == (70, 20, 110, 70)
    np.testing.assert_allclose(labels[0, 1:], (70, 20, 110, 70))
    flipped, labels = augment.flip(image, _one_box_labels(box), horizontal=False)
    np.testing.assert_allclose(labels[0, 1:], white_extent(flipped))


def test_letterbox_places_the_box_at_its_mapped_label() -> None:
    box = (20, 10, 60, 50)
    image, ratio, pad = letterbox(box_image(100, 200, [box]), (160, 160), scale_up=False)
    assert image.shape == (160, 160, 3) and ratio == 0.8
    expected = np.array(box) * ratio + [pad[0], pad[1], pad[0], pad[1]]
    np.testing.assert_allclose(white_extent(image), expected, atol=1.0)
    assert (image[0, 0] == 114).all()


COLOURS = {0: (255, 0, 0), 1: (0, 255, 0), 2: (0, 0, 255), 3: (255, 255, 0)}


def test_mosaic_keeps_each_box_with_its_pixels() -> None:
    boxes = {0: (30, 30, 90, 80), 1: (10, 60, 70, 120), 2: (40, 20, 90, 70), 3: (20, 20, 60, 60)}

    def load(index: int) -> tuple[np.ndarray, np.ndarray]:
        height, width = 128, 128 - 16 * index
        x1, y1, x2, y2 = boxes[index]
        image = np.zeros((height, width, 3), np.uint8)
        image[y1:y2, x1:x2] = COLOURS[index]  # a colour per image tells the four boxes apart
        label = [[index, (x1 + x2) / 2 / width, (y1 + y2) / 2 / height, (x2 - x1) / width, (y2 - y1) / height]]
        return image, np.array(label, np.float32)

    rng = np.random.default_rng(0)
    for _ in range(6):
        image, labels = mosaic4([load(index) for index in range(4)], 128, rng, augment.Warp(0, 0.1, 0.3, 0, 0))
        assert image.shape == (128, 128, 3)
        for row in labels:
            wanted = np.array(COLOURS[int(row[0])]) > 0
            ys, xs = np.nonzero(((image > 160) == wanted).all(axis=2) & ((image < 100) == ~wanted).all(axis=2))
            extent = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
            np.testing.assert_allclose(row[1:], extent, atol=1.0)


def test_training_sample_labels_match_pixels(tmp_path) -> None:
    for index in range(4):
        write_sample(tmp_path, "train", f"{index}", 96 + 16 * index, 128, [(20 + 5 * index, 16, 60 + 5 * index, 56)])
    split = load_split(load_data_config(write_yaml(tmp_path)), "train")
    settings = dataclasses.replace(STILL, mosaic=1.0, translate=0.1, scale=0.3, fliplr=0.5, flipud=0.5)
    dataset = TrainDataset(split.records, settings, imgsz=128, seed=1)
    checked = 0
    for index in range(8):
        sample = dataset[(0, index % 4)]
        assert sample.image.shape == (3, 128, 128) and sample.image.dtype == np.uint8
        for _, cx, cy, w, h in sample.labels:
            box = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]) * 128
            x1, y1, x2, y2 = np.round(box).astype(int)
            inside = sample.image[:, y1 + 1:y2 - 1, x1 + 1:x2 - 1]
            assert inside.min() > 200  # the white box fills its label (one pixel of edge allowed)
            checked += 1
    assert checked > 4
    repeat = TrainDataset(split.records, settings, imgsz=128, seed=1)[(0, 2)]
    np.testing.assert_array_equal(repeat.image, dataset[(0, 2)].image)  # a function of (seed, epoch, index)


def test_non_mosaic_sample_is_letterboxed_square(tmp_path) -> None:
    config = load_data_config(simple_dataset(tmp_path, count=2))
    dataset = TrainDataset(load_split(config, "train").records, STILL, imgsz=160, seed=0)
    sample = dataset[0]
    image = sample.image.transpose(1, 2, 0)
    for _, cx, cy, w, h in sample.labels:
        expected = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]) * 160
        x1, y1, x2, y2 = expected.round().astype(int)
        assert white_extent(image[y1 - 2:y2 + 2, x1 - 2:x2 + 2]) is not None
        crop = image[y1 + 1:y2 - 1, x1 + 1:x2 - 1]
        assert crop.min() > 200


def test_albumentations_stage_is_seeded_and_changes_pixels() -> None:
    stage = build_albumentations(1.0)  # every op on: blur, median blur, gray, CLAHE
    image = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    first, second = stage(image, 7), stage(image, 7)
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, image) and first.shape == image.shape
    assert np.abs(first[:, :, 0].astype(int) - first[:, :, 1]).mean() < 3  # gray (CLAHE after it shifts a little)
    assert build_albumentations(0.0) is None


def test_augment_settings_are_the_hyp_fields_of_the_same_name() -> None:
    hyp = load_hyp("scratch-high.yaml")
    settings = AugmentSettings.from_hyp(hyp)
    assert (settings.scale, settings.mixup, settings.fliplr) == (0.9, 0.1, hyp.fliplr)
    assert all(getattr(settings, field.name) == getattr(hyp, field.name) for field in dataclasses.fields(settings))
    assert not hasattr(settings, "lr0")  # the dataset sees its own settings, not the optimiser's
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.mosaic = 0.0


def test_albumentations_stage_never_uses_the_network():
    """albumentations checks PyPI for updates when imported; the stage turns that off (training is offline)."""
    probe = (
        "import socket\n"
        "def refuse(*args):\n"
        "    raise SystemExit('network used: ' + repr(args))\n"
        "socket.socket.connect = refuse\n"
        "socket.getaddrinfo = refuse\n"
        "from detect.data.augment.albument import build_albumentations\n"
        "import numpy as np\n"
        "print(build_albumentations(1.0)(np.zeros((8, 8, 3), np.uint8), 0).shape)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "NO_ALBUMENTATIONS_UPDATE"}
    result = subprocess.run(
        [sys.executable, "-c", probe], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(8, 8, 3)"
    assert "version" not in result.stderr.lower(), result.stderr
