"""The sample images shipped in the package: present, decodable, small, and each credited in the README."""

from __future__ import annotations

import cv2

from detect.inference.sample_images import SAMPLES_DIR, sample_images


def test_samples_are_the_three_credited_photos_and_decode():
    images = sample_images()
    assert [path.name for path in images] == ["astronaut.jpg", "chelsea.jpg", "coffee.jpg"]
    shapes = [cv2.imread(str(path), cv2.IMREAD_COLOR).shape for path in images]
    assert shapes == [(512, 512, 3), (300, 451, 3), (400, 600, 3)]  # skimage.data's sizes, unchanged
    readme = (SAMPLES_DIR / "README.md").read_text()
    assert all(f"| {path.name} |" in readme for path in images)


def test_samples_stay_small():
    assert sum(path.stat().st_size for path in sample_images()) < 300_000  # they ship in every wheel
