"""The fixed-shape YOLOv5 loss against the plain reference (tests/training/reference_loss.py): loss and gradients."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torchvision.ops import box_convert, complete_box_iou_loss

from detect.backend import select
from detect.config import Hyp, load_hyp
from detect.models import build_model
from detect.ops.boxes import ciou_paired
from detect.training.loss import DetectionLoss, LossSettings, last_write
from detect.training.optim import OptimSettings
from detect.training.step import StepRecipe, build_parts
from tests.training.reference_loss import ReferenceLoss, flat_targets, reference_ciou

# yolov5's P5 anchors (docs/yolov5.md, "Architecture") in grid units of strides 8, 16, 32, as the model's buffer holds
# them.
ANCHORS = (torch.tensor([[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]],
                        dtype=torch.float32).view(3, 3, 2) / torch.tensor([8.0, 16.0, 32.0]).view(3, 1, 1))
GRIDS = (8, 4, 2)  # a 64 x 64 input
CAPACITY = 128  # detect.data.batch.TARGET_BUCKET
PLAIN = LossSettings(box_gain=0.05, obj_gain=1.0, cls_gain=0.5, cls_pos_weight=1.0, obj_pos_weight=1.0,
                     anchor_threshold=4.0, label_smoothing=0.0, focal_gamma=0.0)


def padded_targets(generator: torch.Generator, counts: list[int], num_classes: int) -> torch.Tensor:
    """(B, CAPACITY, 5) random targets, counts[b] real rows in image b, the rest padding (cls -1)."""
    padded = torch.zeros((len(counts), CAPACITY, 5))
    padded[..., 0] = -1
    for image, count in enumerate(counts):
        padded[image, :count, 0] = torch.randint(num_classes, (count,), generator=generator).float()
        padded[image, :count, 1:3] = torch.rand((count, 2), generator=generator)
        padded[image, :count, 3:5] = torch.rand((count, 2), generator=generator) * 0.6 + 0.01
    return padded


def raw_outputs(generator: torch.Generator, batch: int, num_classes: int, levels: int = 3) -> list[torch.Tensor]:
    """Random head outputs (B, 3, g, g, 5 + nc) per level."""
    return [torch.randn((batch, 3, grid, grid, 5 + num_classes), generator=generator) for grid in GRIDS[:levels]]


def assert_matches_reference(settings: LossSettings, raw: list[torch.Tensor], padded: torch.Tensor,
                             num_classes: int, anchors: torch.Tensor = ANCHORS) -> torch.Tensor:
    """Loss, items and gradients w.r.t. every raw output agree with the reference (1e-5), with every candidate
    scored under its mask (fixed shapes) and with the matched ones alone (matched_only); returns the items."""
    theirs = [r.clone().requires_grad_() for r in raw]
    expected_total, expected_items = ReferenceLoss(settings, anchors, num_classes)(theirs, flat_targets(padded))
    expected_total.backward()
    for matched_only in (False, True):
        ours = [r.clone().requires_grad_() for r in raw]
        total, items = DetectionLoss(settings, anchors, num_classes, matched_only)(ours, padded)
        total.backward()
        assert total.shape == () and items.shape == (3,) and not items.requires_grad
        torch.testing.assert_close(total, expected_total, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(items, expected_items, rtol=1e-5, atol=1e-5)
        for mine, reference in zip(ours, theirs):
            assert reference.grad.abs().max() > 0
            torch.testing.assert_close(mine.grad, reference.grad, rtol=1e-5, atol=1e-7)
    return items


def test_gains_scale_with_levels_classes_and_image_size() -> None:
    coco = LossSettings.from_hyp(Hyp(), num_levels=3, num_classes=80, imgsz=640)
    assert (coco.box_gain, coco.obj_gain, coco.cls_gain) == (0.05, 1.0, 0.5)
    small = LossSettings.from_hyp(Hyp(fl_gamma=1.5, cls_pw=2.0), num_levels=4, num_classes=1, imgsz=320,
                                  label_smoothing=0.1)
    assert small.box_gain == pytest.approx(0.05 * 3 / 4)
    assert small.obj_gain == pytest.approx(1.0 * 0.25 * 3 / 4)
    assert small.cls_gain == pytest.approx(0.5 / 80 * 3 / 4)
    assert (small.focal_gamma, small.cls_pos_weight, small.label_smoothing) == (1.5, 2.0, 0.1)


def test_last_write_wins_like_sequential_writes() -> None:
    generator = torch.Generator().manual_seed(0)
    index = torch.randint(6, (40,), generator=generator)
    values = torch.rand(40, generator=generator)
    valid = torch.rand(40, generator=generator) > 0.3
    expected, first, written = torch.zeros(9), torch.zeros(9), set()
    for slot, value, ok in zip(index.tolist(), values.tolist(), valid.tolist()):
        if ok:
            first[slot] = first[slot] if slot in written else value
            expected[slot] = value
            written.add(slot)
    result = last_write(index, values, valid, 9)
    assert torch.equal(result, expected)
    assert not torch.equal(result, first)  # duplicates are present, so the order matters


@pytest.mark.parametrize("num_classes, smoothing, gamma, cls_pw, obj_pw", [
    (3, 0.0, 0.0, 1.0, 1.0),
    (3, 0.1, 1.5, 1.3, 0.7),
    (1, 0.1, 0.0, 1.0, 1.0),
    (80, 0.1, 1.5, 1.0, 1.0),
])
def test_random_batches(num_classes: int, smoothing: float, gamma: float, cls_pw: float, obj_pw: float) -> None:
    generator = torch.Generator().manual_seed(num_classes)
    settings = dataclasses.replace(PLAIN, label_smoothing=smoothing, focal_gamma=gamma, cls_pos_weight=cls_pw,
                                   obj_pos_weight=obj_pw, cls_gain=0.5 * num_classes / 80)
    counts = [0, 5, 37, 2]  # an empty image among them
    items = assert_matches_reference(settings, raw_outputs(generator, 4, num_classes),
                                     padded_targets(generator, counts, num_classes), num_classes)
    assert (items[2] == 0) == (num_classes == 1)  # no class loss for one class


def test_fully_empty_batch() -> None:
    generator = torch.Generator().manual_seed(1)
    items = assert_matches_reference(PLAIN, raw_outputs(generator, 2, 3), padded_targets(generator, [0, 0], 3), 3)
    assert items[0] == 0 and items[2] == 0 and items[1] > 0


def test_crowded_image_with_several_matches_per_cell() -> None:
    generator = torch.Generator().manual_seed(2)
    padded = padded_targets(generator, [120, 3], 4)
    padded[0, :120, 1:3] = padded[0, :120, 1:3] * 0.3 + 0.35  # all near the middle: few cells, many duplicates
    raw = raw_outputs(generator, 2, 4)
    for image, anchor, gy, gx, *_ in ReferenceLoss(PLAIN, ANCHORS, 4).build_targets(raw, flat_targets(padded)):
        cells = torch.stack((image, anchor, gy, gx), 1)
        assert len(cells.unique(dim=0)) < len(cells) / 4  # the test is about repeated (anchor, cell) writes
    assert_matches_reference(dataclasses.replace(PLAIN, cls_gain=0.025), raw, padded, 4)


def test_borders_and_cell_edges() -> None:
    # Centres exactly on cell edges (frac 0), at frac 0.5 on each grid, and on both image borders.
    edges = torch.tensor([0.0, 1.0, 0.5, 0.75, 0.0625, 0.1875, 0.625, 0.9375])
    cx, cy = torch.meshgrid(edges, edges, indexing="ij")
    rows = torch.stack(((torch.arange(64) % 3).float(), cx.flatten(), cy.flatten(), torch.full((64,), 0.25),
                        torch.full((64,), 0.125)), 1)
    padded = torch.zeros((2, CAPACITY, 5))
    padded[..., 0] = -1
    padded[0, :64] = rows
    padded[1, :64] = rows[torch.arange(63, -1, -1)]
    padded[1, :64, 3:5] = torch.tensor([0.8, 0.6])  # large: matches on every level, 2 x 2 included
    generator = torch.Generator().manual_seed(3)
    assert_matches_reference(dataclasses.replace(PLAIN, cls_gain=0.02), raw_outputs(generator, 2, 3), padded, 3)


def test_two_levels_use_their_own_balance() -> None:
    generator = torch.Generator().manual_seed(4)
    anchors = ANCHORS[:2]
    assert DetectionLoss(PLAIN, anchors, 3).balance == (4.0, 1.0)
    assert_matches_reference(PLAIN, raw_outputs(generator, 2, 3, levels=2), padded_targets(generator, [9, 4], 3), 3,
                             anchors=anchors)


def test_autocast_outputs_give_the_fp32_loss() -> None:
    generator = torch.Generator().manual_seed(5)
    raw = [r.bfloat16() for r in raw_outputs(generator, 2, 3)]
    padded = padded_targets(generator, [6, 11], 3)
    loss = DetectionLoss(PLAIN, ANCHORS, 3)
    with torch.autocast(device_type=raw[0].device.type, dtype=torch.bfloat16):
        total, items = loss(raw, padded)
    expected_total, expected_items = loss([r.float() for r in raw], padded)
    assert total.dtype == torch.float32
    torch.testing.assert_close(total, expected_total, rtol=1e-6, atol=0)
    torch.testing.assert_close(items, expected_items, rtol=1e-6, atol=0)


def test_compiles_once_with_no_graph_break_and_reads_live_anchors() -> None:
    # fullgraph=True fails on any graph break, and a host sync (.item(), nonzero(), boolean indexing) is one.
    # CompileCounter counts compiled frames and runs them eagerly: the cheapest proof (no C compiler needed).
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    anchors = ANCHORS.clone()
    loss = DetectionLoss(PLAIN, anchors, 3)
    counter = CompileCounter()
    compiled = torch.compile(loss, backend=counter, fullgraph=True, dynamic=False)
    generator = torch.Generator().manual_seed(6)
    raw = raw_outputs(generator, 2, 3)
    for counts in ([3, 0], [40, 17], [0, 0]):
        padded = padded_targets(generator, counts, 3)
        torch.testing.assert_close(compiled(raw, padded), loss(raw, padded), rtol=0, atol=0)
    before = compiled(raw, padded_targets(torch.Generator().manual_seed(7), [20, 5], 3))[0]
    anchors.mul_(1.5)  # what AutoAnchor does to the model's buffer
    padded = padded_targets(torch.Generator().manual_seed(7), [20, 5], 3)
    after = compiled(raw, padded)[0]
    assert after != before
    expected = ReferenceLoss(PLAIN, anchors, 3)(raw, flat_targets(padded))[0]
    torch.testing.assert_close(after, expected, rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 1


def realistic_boxes(generator: torch.Generator, count: int) -> torch.Tensor:
    """(count, 4) xywh in grid units as the loss sees them: centres in (-0.5, 1.5), sizes 0.1 to 40 (log-uniform)."""
    centre = torch.rand((count, 2), generator=generator) * 2 - 0.5
    size = torch.exp(torch.rand((count, 2), generator=generator) * math.log(400) + math.log(0.1))
    return torch.cat((centre, size), 1)


def test_ciou_against_yolov5_and_torchvision() -> None:
    # Measured on 100k such pairs: ciou_paired vs yolov5's (reference_ciou) 1.8e-7, torchvision's
    # complete_box_iou_loss vs yolov5's 5.7e-7 in value and 1.7e-5 in gradient (gradients up to 10): all three are
    # within fp32 rounding of the fp64 value (1.2e-6). torchvision puts eps where yolov5 does (union, enclosing
    # diagonal^2, alpha's denominator) but takes w and h back from corners. It is not used for another reason:
    # boolean-mask indexing inside it, shown below.
    generator = torch.Generator().manual_seed(8)
    pred, target = realistic_boxes(generator, 4096).requires_grad_(), realistic_boxes(generator, 4096)
    ours, = torch.autograd.grad(ciou_paired(pred, target).sum(), pred)
    expected = reference_ciou(pred, target)
    yolov5, = torch.autograd.grad(expected.sum(), pred)
    torch.testing.assert_close(ciou_paired(pred, target), expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(ours, yolov5, rtol=1e-5, atol=1e-5)
    with BooleanIndexingSeen() as boolean_indexing:
        library = 1 - complete_box_iou_loss(box_convert(pred, "cxcywh", "xyxy"), box_convert(target, "cxcywh", "xyxy"))
    torchvision, = torch.autograd.grad(library.sum(), pred)
    torch.testing.assert_close(library, expected, rtol=0, atol=2e-6)
    torch.testing.assert_close(torchvision, yolov5, rtol=1e-5, atol=5e-5)
    assert boolean_indexing.seen, "torchvision's CIoU became fixed-shape: consider it in training/loss.py"
    with BooleanIndexingSeen() as ours_indexing:
        DetectionLoss(PLAIN, ANCHORS, 3)(raw_outputs(generator, 2, 3), padded_targets(generator, [7, 2], 3))
    assert not ours_indexing.seen


class BooleanIndexingSeen(TorchFunctionMode):
    """Notes whether code run inside it indexes a tensor with a boolean mask (a nonzero underneath: data-dependent
    shape, host sync)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__):
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            self.seen |= any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index)
        return func(*args, **(kwargs or {}))


def test_the_cpu_training_step_scores_the_matched_candidates_only() -> None:
    model, hyp = build_model("yolov5n.yaml", num_classes=3), load_hyp()
    parts = build_parts(model, select("cpu"), StepRecipe(hyp, OptimSettings.from_hyp(hyp), 16, 320))
    assert parts.criterion.matched_only and not DetectionLoss(PLAIN, ANCHORS, 3).matched_only
