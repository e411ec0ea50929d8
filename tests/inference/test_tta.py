"""Test-time augmentation: boxes come back to the input's pixels through the scale and the flip, each pass keeps the
levels yolov5 keeps (at 2, 3 and 4 levels), a real model runs through it, and an export is refused in one line."""

from __future__ import annotations

import math

import pytest
import torch

from detect import backend as backends
from detect.errors import UserError
from detect.inference.runtimes.torch_model import TorchInference
from detect.inference.tta import augment_model, augmented, level_rows, restore_boxes, scale_images
from detect.models import build_model
from tests.shared_data import COCO128, YOLOV5N, needs_shared


def bright_box_predict(strides: list[int], anchors: int = 3):
    """A stand-in model: every row is the box [cx, cy, w, h] around the pixels brighter than 0.9 (the white
    rectangle), its objectness the level's index, with as many rows per level as a real head has."""
    def predict(images: torch.Tensor) -> torch.Tensor:
        height, width = images.shape[2:]
        ys, xs = torch.nonzero(images[0, 0] > 0.9, as_tuple=True)
        x1, y1, x2, y2 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
        box = torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1)).float()
        levels = [torch.cat((box, torch.tensor([float(level), 1.0]))).expand(
            anchors * (height // stride) * (width // stride), 6) for level, stride in enumerate(strides)]
        return torch.cat(levels)[None]
    return predict


def white_rectangle(height: int, width: int, box: tuple[int, int, int, int]) -> torch.Tensor:
    images = torch.zeros(1, 3, height, width)
    x1, y1, x2, y2 = box
    images[..., y1:y2, x1:x2] = 1.0
    return images


@pytest.mark.parametrize("strides", [[8, 16], [8, 16, 32], [4, 8, 16, 32]])
def test_boxes_come_back_through_scale_and_flip(strides):
    # Off-centre, so that a missing de-flip moves the box by 200 pixels; 50 px inside the edges.
    box = (40, 60, 140, 120)  # x1, y1, x2, y2 in the 320 x 480 (h x w) input
    rows = augmented(bright_box_predict(strides), strides)(white_rectangle(320, 480, box))[0]
    expected = torch.tensor([90.0, 90.0, 100.0, 60.0])  # cx, cy, w, h
    # One resize pixel, divided by the scale (0.67), is the most a bilinear edge may move a side.
    assert torch.allclose(rows[:, :4], expected.expand(len(rows), 4), atol=1 / 0.67)


def test_restore_boxes_inverts_flip_then_scale_exactly():
    size, scaled = (320, 480), (265, 398)  # int(320 * 0.83), int(480 * 0.83)
    boxes = torch.tensor([[[90.0, 90.0, 100.0, 60.0, 0.8, 1.0]], [[400.0, 10.0, 20.0, 4.0, 0.3, 0.5]]])
    flipped = boxes.clone()
    flipped[..., 0] = size[1] - flipped[..., 0]
    forward = flipped * torch.tensor([scaled[1] / size[1], scaled[0] / size[0]] * 2 + [1.0, 1.0])
    before = forward.clone()
    assert torch.allclose(restore_boxes(forward, size, scaled, flipped=True), boxes, atol=1e-4)
    assert torch.equal(forward, before)  # the input is not changed in place


@pytest.mark.parametrize("strides", [[8, 16], [8, 16, 32], [4, 8, 16, 32]])
def test_each_pass_keeps_the_levels_yolov5_keeps(strides):
    # yolov5's _clip_augmented, in its own arithmetic: with g = sum(4**l) grid units per level set, the full-size pass
    # loses its last (coarsest) level's rows and the smallest pass its first (finest) level's rows.
    rows = augmented(bright_box_predict(strides), strides)(white_rectangle(640, 640, (100, 100, 300, 300)))[0]
    levels = len(strides)
    expected = []
    for ratio in (1.0, 0.83, 0.67):
        side = math.ceil(640 * ratio / max(strides)) * max(strides)
        total = sum(3 * (side // stride) ** 2 for stride in strides)
        unit = total // sum(4 ** level for level in range(levels))  # the coarsest level's rows
        expected.append(total - unit if ratio == 1.0 else total - unit * 4 ** (levels - 1) if ratio == 0.67 else total)
    assert len(rows) == sum(expected)
    objectness = rows[:, 4]
    full, middle, small = objectness.split(expected)
    assert levels - 1 not in full.tolist() and 0 not in small.tolist()
    assert set(middle.tolist()) == set(range(levels))


def test_scale_images_pads_to_the_stride_with_grey():
    images = torch.rand(2, 3, 320, 480)
    scaled = scale_images(images, 0.83, 32)
    assert scaled.shape == (2, 3, 288, 416)  # ceil(265.6 / 32) * 32, ceil(398.4 / 32) * 32
    assert torch.all(scaled[:, :, 265:, :] == 0.447) and torch.all(scaled[:, :, :, 398:] == 0.447)
    assert scale_images(images, 1.0, 32) is images


def test_level_rows_refuses_a_layout_that_does_not_fit():
    assert level_rows((64, 64), [8, 16, 32], 3 * (64 + 16 + 4)) == [192, 48, 12]
    with pytest.raises(ValueError, match="do not split into levels"):
        level_rows((64, 64), [8, 16, 32], 100)


@pytest.mark.parametrize("config, stride", [("yolov5n.yaml", 32), ("yolov5n6.yaml", 64)])  # P3-P5, P3-P6
def test_a_detection_model_runs_augmented_and_its_full_pass_is_the_plain_one(config, stride):
    model = build_model(config, num_classes=3).eval()
    inference = TorchInference(model, backends.select("cpu"))
    images = torch.rand(2, 3, 128, 192, generator=torch.Generator().manual_seed(0))
    plain = inference(images)
    rows = augment_model(inference)(images)
    coarsest = 3 * (128 // stride) * (192 // stride)
    # The first part is the unaugmented pass without its coarsest level; scores stay probabilities.
    torch.testing.assert_close(rows[:, :plain.shape[1] - coarsest], plain[:, :-coarsest])
    assert rows.shape[1] > plain.shape[1] and rows.shape[2] == plain.shape[2]
    assert 0 <= rows[..., 4:].min() and rows[..., 4:].max() <= 1


def test_an_export_is_refused_in_one_line():
    class Exported:  # what OnnxInference offers: no PyTorch model behind it
        names, stride, fixed_shape = ("a",), 32, (640, 640)

    with pytest.raises(UserError, match=r"^--augment runs PyTorch weights \(.pt\) only"):
        augment_model(Exported())


@needs_shared
def test_yolov5n_augmented_finds_what_the_plain_pass_finds():
    from detect.inference.detector import Detector

    image = COCO128 / "images" / "train2017" / "000000000009.jpg"
    plain, augmented_ = (Detector(YOLOV5N, device="cpu", augment=augment)(image)[0] for augment in (False, True))
    assert len(augmented_) > 0
    assert set(augmented_.counts()) & set(plain.counts())
