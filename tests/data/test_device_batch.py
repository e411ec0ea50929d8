"""Device-side batch transform: float [0, 1] on the backend's device, batched resize, targets still on the boxes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from detect.backend import select
from detect.data.batch import Sample, collate
from detect.data.device_batch import multi_scale_sizes, pick_size, to_device_batch
from tests.data.helpers import box_image, white_extent


def _batch():
    box = (40, 16, 100, 48)
    image = box_image(64, 128, [box])[:, :, ::-1].transpose(2, 0, 1).copy()
    labels = np.array([[1, 70 / 128, 32 / 64, 60 / 128, 32 / 64]], np.float32)
    return collate([Sample(image=image, labels=labels, path="a", image_id=0)] * 2)


@pytest.mark.parametrize("size", [None, 96, (32, 192), (128, 64)])
def test_resize_keeps_targets_on_the_box(size) -> None:
    backend = select("cpu")
    result = to_device_batch(_batch(), backend, size)
    height, width = result.size
    assert result.images.dtype == torch.float32 and result.images.device == backend.device
    assert 0.0 <= float(result.images.min()) and float(result.images.max()) <= 1.0
    assert result.size == ((64, 128) if size is None else ((size, size) if isinstance(size, int) else size))
    _, _, cx, cy, w, h = result.targets[0].tolist()
    expected = [(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height]
    drawn = white_extent((result.images[0].permute(1, 2, 0).numpy() * 255).astype(np.uint8))
    np.testing.assert_allclose(drawn, expected, atol=1.0)


def test_multi_scale_sizes_are_few_stride_multiples() -> None:
    sizes = multi_scale_sizes(640)
    assert sizes == (320, 480, 640, 800, 960)
    picks = {pick_size(sizes, seed=0, step=step) for step in range(50)}
    assert picks <= set(sizes) and len(picks) > 2
    assert pick_size(sizes, 7, 11) == pick_size(sizes, 7, 11)
