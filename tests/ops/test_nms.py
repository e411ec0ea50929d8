"""NMS: torchvision, the NPU path (CPU stand-in) and a slow reference keep the same detections."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest
import torch
import torchvision

from detect.ops.nms import _packed_calls, non_max_suppression
from tests.ops.reference_nms import reference_kernel, reference_non_max_suppression


@pytest.fixture(params=["torchvision", "reference", "npu"])
def kernel(request, monkeypatch):
    """Each single-class NMS kernel the pipeline can be given."""
    if request.param == "torchvision":
        return torchvision.ops.nms
    if request.param == "reference":
        return reference_kernel
    from tests.npu_standin import npu_backend

    return npu_backend(monkeypatch).nms


def make_prediction(
    generator: torch.Generator, images: int, boxes: int, classes: int, size: float = 640.0
) -> torch.Tensor:
    """Random decoded head output (B, N, 5 + nc): centres in the image, sizes 4..160 px, sigmoided scores."""
    centres = torch.rand(images, boxes, 2, generator=generator) * size
    sizes = 4 + torch.rand(images, boxes, 2, generator=generator) * 156
    scores = torch.rand(images, boxes, 1 + classes, generator=generator) ** 2
    return torch.cat((centres, sizes, scores), dim=2)


def assert_same_detections(actual: list[torch.Tensor], expected: list[np.ndarray]) -> None:
    """Both lists hold the same rows per image, in the same (decreasing score) order, up to float32 rounding."""
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.shape == (len(want), 6), (got.shape, want.shape)
        np.testing.assert_allclose(got.double().numpy(), want, rtol=0, atol=1e-4)


def run_both(kernel, prediction: torch.Tensor, conf: float, iou: float, **options) -> None:
    """Run the pipeline with the kernel and the reference pipeline and compare."""
    actual = non_max_suppression(prediction, conf, iou, nms=kernel, **options)
    expected = reference_non_max_suppression(prediction, conf, iou, **options)
    assert_same_detections(actual, expected)


# Sizes stay small: the reference is pure Python, and the "reference" kernel runs it inside the pipeline too.
@pytest.mark.parametrize("classes", [1, 3, 80])
@pytest.mark.parametrize("multi_label", [True, False])
def test_random_inputs_match_reference(kernel, classes: int, multi_label: bool) -> None:
    generator = torch.Generator().manual_seed(classes * 10 + multi_label)
    prediction = make_prediction(generator, images=2, boxes=300 if classes < 80 else 60, classes=classes)
    run_both(kernel, prediction, 0.05, 0.45, multi_label=multi_label)


@pytest.mark.parametrize("threads", [2, 3])
def test_kernel_calls_on_threads_give_what_one_thread_gives(threads: int) -> None:
    # Many groups, so many packed calls: their results must come back in call order, whatever thread ran them.
    prediction = make_prediction(torch.Generator().manual_seed(11), images=4, boxes=400, classes=80)
    one = non_max_suppression(prediction, 0.01, 0.5, nms=torchvision.ops.nms)
    several = non_max_suppression(prediction, 0.01, 0.5, nms=torchvision.ops.nms, threads=threads)
    assert sum(len(rows) for rows in one) > 300
    assert all(torch.equal(a, b) for a, b in zip(one, several))


def _threaded_detections(prediction: torch.Tensor, queue) -> None:
    torch.set_num_threads(1)  # as in a DataLoader worker: the parent's OpenMP pool does not survive a fork either
    queue.put(sum(len(rows) for rows in non_max_suppression(prediction, 0.01, 0.5, nms=torchvision.ops.nms,
                                                              threads=2)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is what leaves a child its parent's dead pool threads")
def test_a_forked_child_runs_threaded_nms_on_its_own_pool() -> None:
    prediction = make_prediction(torch.Generator().manual_seed(12), images=2, boxes=300, classes=80)
    expected = sum(len(rows) for rows in non_max_suppression(prediction, 0.01, 0.5, nms=torchvision.ops.nms,
                                                             threads=2))  # the parent's pool now exists
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_threaded_detections, args=(prediction, queue))
    child.start()
    try:
        assert queue.get(timeout=60) == expected  # the parent's pool in the child would never answer
    finally:
        child.join(timeout=10)
        child.kill()


def test_agnostic_and_max_det(kernel) -> None:
    prediction = make_prediction(torch.Generator().manual_seed(7), images=2, boxes=200, classes=5)
    run_both(kernel, prediction, 0.01, 0.6, agnostic=True)
    run_both(kernel, prediction, 0.01, 0.6, max_det=17)


@pytest.fixture(scope="module")
def crowded() -> tuple[torch.Tensor, list[np.ndarray]]:
    """1,500 boxes x 2 classes that all pass: 3,000 candidates, and the reference result with a 2,000 cap."""
    generator = torch.Generator().manual_seed(3)
    prediction = make_prediction(generator, images=1, boxes=1500, classes=2)
    prediction[..., 4:] = 0.5 + 0.5 * torch.rand(1, 1500, 3, generator=generator)
    expected = reference_non_max_suppression(prediction, 0.001, 0.6, max_candidates=2000, max_det=100000)
    return prediction, expected


def test_candidates_beyond_the_cap_never_enter_nms(kernel, crowded) -> None:
    # The cap of record is 30,000 (docs/yolov5.md, "NMS"); the same code path is tested with 2,000 of 3,000.
    prediction, expected = crowded
    actual = non_max_suppression(prediction, 0.001, 0.6, max_candidates=2000, max_det=100000, nms=kernel)
    assert_same_detections(actual, expected)
    # The cap really bites: with IoU threshold 1 nothing is suppressed, so exactly the 2,000 best come out.
    unsuppressed = non_max_suppression(prediction, 0.001, 1.0, max_candidates=2000, max_det=10**6, nms=kernel)[0]
    every_score = (prediction[0, :, 4:5] * prediction[0, :, 5:]).flatten()
    assert torch.equal(unsuppressed[:, 4], every_score.sort(descending=True).values[:2000])


def test_identical_boxes_and_tied_scores(kernel) -> None:
    # Five copies of one box with the same score in class 0, the same box in class 1, and a far box.
    row = [100.0, 100.0, 50.0, 50.0, 0.9, 0.8, 0.0]
    other_class = [100.0, 100.0, 50.0, 50.0, 0.9, 0.0, 0.8]
    far = [400.0, 400.0, 50.0, 50.0, 0.9, 0.8, 0.0]
    prediction = torch.tensor([[row] * 5 + [other_class, far]])
    result = non_max_suppression(prediction, 0.25, 0.45, nms=kernel)[0]
    assert result.shape == (3, 6)
    assert sorted(result[:, 5].tolist()) == [0.0, 0.0, 1.0]
    run_both(kernel, prediction, 0.25, 0.45)


def test_tied_scores_overlapping_boxes_keep_the_first(kernel) -> None:
    # Equal scores, overlapping boxes: the earlier one (stable order) survives on every kernel.
    prediction = torch.tensor([[[100.0, 100, 50, 50, 1.0, 0.5], [105.0, 100, 50, 50, 1.0, 0.5]]])
    result = non_max_suppression(prediction, 0.25, 0.45, nms=kernel)[0]
    assert result.shape == (1, 6)
    assert result[0, 0].item() == pytest.approx(75.0)


def test_empty_input_and_nothing_above_threshold(kernel) -> None:
    assert non_max_suppression(torch.zeros(2, 0, 85), nms=kernel)[0].shape == (0, 6)
    result = non_max_suppression(torch.full((3, 10, 85), 0.1), 0.25, nms=kernel)
    assert [r.shape for r in result] == [(0, 6)] * 3


def test_class_filter_and_output_format() -> None:
    prediction = make_prediction(torch.Generator().manual_seed(11), images=1, boxes=200, classes=4)
    result = non_max_suppression(prediction, 0.05, 0.5, classes=[2], nms=torchvision.ops.nms)[0]
    assert len(result) > 0 and set(result[:, 5].tolist()) == {2.0}
    full = non_max_suppression(prediction, 0.05, 0.5, nms=torchvision.ops.nms)[0]
    assert torch.all(full[:-1, 4] >= full[1:, 4])
    assert torch.all(full[:, 2] >= full[:, 0]) and torch.all(full[:, 3] >= full[:, 1])


def test_input_is_not_mutated() -> None:
    prediction = make_prediction(torch.Generator().manual_seed(5), images=2, boxes=100, classes=3)
    before = prediction.clone()
    non_max_suppression(prediction, 0.01, 0.5, nms=torchvision.ops.nms)
    assert torch.equal(prediction, before)


def test_bad_shape_is_rejected() -> None:
    with pytest.raises(ValueError, match="5 \\+ nc"):
        non_max_suppression(torch.zeros(10, 85), nms=torchvision.ops.nms)


@pytest.mark.parametrize("agnostic", [False, True])
def test_one_kernel_call_for_the_whole_batch_keeps_every_image_apart(kernel, agnostic: bool) -> None:
    # Image 1 repeats image 0's boxes exactly: only the image offset keeps them from suppressing each other.
    prediction = make_prediction(torch.Generator().manual_seed(21), images=3, boxes=150, classes=4)
    prediction[1] = prediction[0]
    calls = []

    def counting(boxes, scores, iou):
        calls.append(len(boxes))
        return kernel(boxes, scores, iou)

    expected = reference_non_max_suppression(prediction, 0.05, 0.5, agnostic=agnostic, max_det=40)
    assert_same_detections(non_max_suppression(prediction, 0.05, 0.5, nms=counting, agnostic=agnostic, max_det=40,
                                               whole_batch=True), expected)
    assert len(calls) == 1
    calls.clear()
    assert_same_detections(non_max_suppression(prediction, 0.05, 0.5, nms=counting, agnostic=agnostic, max_det=40),
                           expected)
    assert len(calls) >= 3  # per (image, class) groups, packed, never two images in one call


def test_groups_share_a_call_up_to_the_pack_size_and_never_across_images() -> None:
    assert _packed_calls([3, 4, 300, 2, 2], [0, 0, 0, 0, 1], 256) == [7, 300, 2, 2]
    assert _packed_calls([100, 100, 100], [0, 0, 0], 256) == [200, 100]
    assert _packed_calls([], [], 256) == []


def test_an_image_without_candidates_launches_no_kernel() -> None:
    prediction = make_prediction(torch.Generator().manual_seed(4), images=3, boxes=50, classes=2)
    prediction[1, :, 4] = 0.0
    calls = []
    result = non_max_suppression(prediction, 0.05, 0.5, nms=lambda *args: calls.append(1) or torchvision.ops.nms(*args))
    assert len(calls) == 2 and result[1].shape == (0, 6) and len(result[0]) > 0 and len(result[2]) > 0


def test_scores_at_the_threshold_are_decided_by_the_exact_product() -> None:
    # Class scores a few float32 steps either side of conf / obj: the cheap pre-filter (cls > conf / obj, relaxed)
    # must keep exactly the (box, class) pairs whose float32 product obj * cls exceeds conf.
    conf, rows = 0.001, []
    for obj in (0.0010001, 0.013, 0.25, 0.7777, 1.0):
        edge = torch.tensor(conf / obj, dtype=torch.float32)
        steps = [edge]
        for _ in range(6):
            steps.append(torch.nextafter(steps[-1], torch.tensor(2.0)))
            steps.insert(0, torch.nextafter(steps[0], torch.tensor(0.0)))
        scores = torch.stack(steps)
        for start in range(0, len(scores), 4):
            row = torch.zeros(9)
            row[:4] = torch.tensor([100.0 + 300 * len(rows), 100, 10, 10])  # far apart: NMS removes nothing
            row[4] = obj
            row[5:5 + len(scores[start:start + 4])] = scores[start:start + 4]
            rows.append(row)
    prediction = torch.stack(rows)[None]
    result = non_max_suppression(prediction, conf, 0.5, nms=torchvision.ops.nms, max_det=10**6)[0]
    products = prediction[0, :, 5:] * prediction[0, :, 4:5]
    expected = sorted(products[products > conf].tolist())
    assert sorted(result[:, 4].tolist()) == expected
    assert 0 < len(expected) < (products > 0).sum()  # the boundary really is crossed inside the test data
