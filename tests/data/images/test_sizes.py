"""The pixel limit read from an image's header (never its pixels), and images whose side rounds to 0 when fitted."""

from __future__ import annotations

import tracemalloc

import cv2
import numpy as np
import pytest

from detect.data.images.letterbox import fitted_size, letterbox
from detect.data.images.pixels import ImageTooLarge, check_pixels, header_size
from detect.inference.media import load_image
from tests.data.helpers import write_flat_png


def test_the_size_comes_from_the_header_even_past_pils_own_limit(tmp_path):
    bomb = write_flat_png(tmp_path / "bomb.png", 30000, 30000)  # 0.9 MB on disk, 2.7 GB decoded
    tracemalloc.start()
    try:
        assert header_size(bomb) == (30000, 30000)  # over twice PIL's limit: Image.open alone refuses to say
        with pytest.raises(ImageTooLarge, match=r"^30000x30000 is 900,000,000 pixels, more than the limit of "
                                                r"89,478,485 \(--max-pixels\)$"):
            load_image(bomb)
        assert check_pixels(bomb, 2**30) == (30000, 30000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 * 2**20


def test_any_format_is_checked_and_one_no_reader_knows_is_refused(tmp_path):
    photo = tmp_path / "photo.jpg"
    cv2.imwrite(str(photo), np.zeros((30, 40, 3), np.uint8))
    assert check_pixels(photo, 1200) == (40, 30)
    with pytest.raises(ImageTooLarge, match="^40x30 is 1,200 pixels, more than the limit of 1,199"):
        check_pixels(photo, 1199)
    garbage = tmp_path / "garbage.png"
    garbage.write_bytes(b"not an image" * 10)
    with pytest.raises(OSError, match="cannot decode the image"):
        check_pixels(garbage)


@pytest.mark.parametrize("shape", [(10, 20000), (20000, 10)])
def test_a_side_that_rounds_to_zero_is_one_pixel(shape):
    height, width = shape
    target = (32, 640) if width > height else (640, 32)
    image, ratio, _ = letterbox(np.full((height, width, 3), 200, np.uint8), target, scale_up=True)
    assert image.shape == (*target, 3) and ratio == 0.032
    assert fitted_size(height, width, ratio) == ((1, 640) if width > height else (640, 1))
    assert (image == 200).any(axis=2).sum() == 640  # the one row (or column) of the image, centred in grey
