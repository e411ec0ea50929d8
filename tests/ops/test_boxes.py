"""Box math against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from detect.ops.boxes import (
    box_area,
    box_iou,
    ciou_paired,
    clip_boxes,
    ltwh_to_xyxy,
    xywh_to_xyxy,
    xywhn_to_xyxy,
    xyxy_to_ltwh,
    xyxy_to_xywh,
    xyxy_to_xywhn,
)


@pytest.mark.parametrize("kind", [torch.tensor, np.array])
def test_conversions_round_trip(kind) -> None:
    xywh = kind([[10.0, 20.0, 4.0, 6.0]])
    xyxy = xywh_to_xyxy(xywh)
    assert type(xyxy) is type(xywh)
    assert xyxy.tolist() == [[8.0, 17.0, 12.0, 23.0]]
    assert xyxy_to_xywh(xyxy).tolist() == xywh.tolist()
    assert xyxy_to_ltwh(xyxy).tolist() == [[8.0, 17.0, 4.0, 6.0]]
    assert ltwh_to_xyxy(xyxy_to_ltwh(xyxy)).tolist() == xyxy.tolist()


@pytest.mark.parametrize("kind", [torch.tensor, np.array])
def test_normalised_pixel_round_trip(kind) -> None:
    normalised = kind([[0.5, 0.25, 0.2, 0.1]], dtype=torch.float32 if kind is torch.tensor else np.float32)
    pixels = xywhn_to_xyxy(normalised, width=200, height=100, pad_x=3, pad_y=7)
    assert np.allclose(np.asarray(pixels.tolist()), [[83.0, 27.0, 123.0, 37.0]])
    assert pixels.dtype == normalised.dtype
    back = xyxy_to_xywhn(pixels - kind([[3.0, 7.0, 3.0, 7.0]]), width=200, height=100)
    assert np.allclose(np.asarray(back.tolist()), np.asarray(normalised.tolist()))
    assert xywh_to_xyxy(kind(np.zeros((0, 4)))).shape == (0, 4)


def test_box_iou_known_values() -> None:
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    b = torch.tensor([[1.0, 1.0, 3.0, 3.0], [0.0, 0.0, 2.0, 2.0], [5.0, 5.0, 6.0, 6.0]])
    iou = box_iou(a, b)
    assert iou.shape == (2, 3)
    assert torch.allclose(iou[0], torch.tensor([1 / 7, 1.0, 0.0]))
    assert torch.equal(iou[1], torch.zeros(3))  # degenerate box: zero, not NaN
    assert box_area(a).tolist() == [4.0, 0.0]


@pytest.mark.parametrize("kind", [torch.tensor, np.array])
def test_clip_does_not_mutate(kind) -> None:
    boxes = kind([[-5.0, -1.0, 700.0, 300.0]])
    clipped = clip_boxes(boxes, height=200, width=640)
    assert clipped.tolist() == [[0.0, 0.0, 640.0, 200.0]]
    assert boxes.tolist() == [[-5.0, -1.0, 700.0, 300.0]]


def test_ciou_known_values() -> None:
    a = torch.tensor([[1.0, 1.0, 2.0, 2.0]])  # xywh
    b = torch.tensor([[2.0, 2.0, 2.0, 2.0]])
    # Same aspect ratio so v = 0: IoU 1/7, centre distance^2 = 2, enclosing diagonal^2 = 18.
    assert torch.allclose(ciou_paired(a, b), torch.tensor([1 / 7 - 2 / 18]), atol=1e-6)
    assert torch.allclose(ciou_paired(a, a), torch.tensor([1.0]), atol=1e-6)
    wide = torch.tensor([[2.0, 0.5, 4.0, 1.0]])  # IoU 2/6, centre distance^2 1.25, diagonal^2 4^2 + 2^2
    v = 4 / math.pi**2 * (math.atan(4.0) - math.atan(1.0)) ** 2
    expected = 1 / 3 - (1.25 / 20 + v * v / (v - 1 / 3 + 1))
    assert torch.allclose(ciou_paired(a, wide), torch.tensor([expected]), atol=1e-6)
    assert ciou_paired(a, wide).shape == (1,)
