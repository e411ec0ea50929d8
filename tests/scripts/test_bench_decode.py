"""scripts/bench_decode.py: the reduced decode gives the full load's shape and nearly its pixels."""

from __future__ import annotations

import subprocess
import sys

import cv2
import numpy as np

from detect.data.images.load import load_resized
from tests.scripts.modules import SCRIPTS, script


def write_jpeg(path, height: int, width: int) -> None:
    ys, xs = np.mgrid[:height, :width]
    image = np.stack([xs * 255 // width, ys * 255 // height, (xs + ys) % 256], axis=-1).astype(np.uint8)
    assert cv2.imwrite(str(path), image, [cv2.IMWRITE_JPEG_QUALITY, 95])


def test_reduced_load_matches_the_full_load_in_shape_and_nearly_in_pixels(tmp_path) -> None:
    bench = script("bench_decode")
    for height, width, imgsz in ((480, 640, 320), (333, 1281, 320), (200, 300, 320)):
        path = tmp_path / f"{height}x{width}.jpg"
        write_jpeg(path, height, width)
        full, reduced = load_resized(path, imgsz, augment=True), bench.reduced_load(path, imgsz, (height, width))
        assert full.shape == reduced.shape
        assert np.abs(full.astype(np.int16) - reduced).mean() < 4


def test_a_run_prints_both_rates(tmp_path) -> None:
    write_jpeg(tmp_path / "a.jpg", 480, 640)
    finished = subprocess.run([sys.executable, str(SCRIPTS / "bench_decode.py"), "--images", str(tmp_path),
                               "--rounds", "1"], check=False, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    assert "1 JPEGs, 1 at least twice 320" in finished.stdout
    assert "reduced decode + resize:" in finished.stdout and "full decode + resize:" in finished.stdout
