"""resize() and the CPU NMS path."""

import pytest
import torch
import torchvision

from detect.backend import select


def test_resize_shape_and_constant():
    images = torch.full((2, 3, 37, 53), 0.25)
    resized = select("cpu").resize(images, (64, 80))
    assert resized.shape == (2, 3, 64, 80)
    assert torch.allclose(resized, torch.full_like(resized, 0.25))


def test_resize_halving_averages_pairs():
    # Bilinear, align_corners=False, exact 2x downscale: each output is the mean of two neighbours.
    ramp = torch.arange(8, dtype=torch.float32).repeat(1, 1, 4, 1)
    resized = select("cpu").resize(ramp, (4, 4))
    assert torch.allclose(resized[0, 0, 0], torch.tensor([0.5, 2.5, 4.5, 6.5]))


def test_resize_uint8_comes_back_float():
    images = torch.full((1, 3, 10, 10), 114, dtype=torch.uint8)
    resized = select("cpu").resize(images, (20, 20))
    assert resized.dtype == torch.float32 and torch.all(resized == 114)


@pytest.mark.parametrize("count", [0, 1, 50, 3000])
def test_cpu_nms_matches_torchvision(count):
    generator = torch.Generator().manual_seed(count)
    xy = torch.rand(count, 2, generator=generator) * 600
    boxes = torch.cat([xy, xy + 10 + torch.rand(count, 2, generator=generator) * 150], 1)
    scores = torch.rand(count, generator=generator)
    keep = select("cpu").nms(boxes, scores, 0.5)
    assert keep.dtype == torch.int64
    assert torch.equal(keep, torchvision.ops.nms(boxes, scores, 0.5))


def test_cpu_nms_calls_share_the_cores_only_where_openmp_threads_sleep(monkeypatch) -> None:
    cpu = select("cpu")
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    assert cpu.nms_threads == torch.get_num_threads()
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert cpu.nms_threads == 1
