"""AutoAnchor against hand-computed recall and on labels drawn around known anchors (docs/yolov5.md, "AutoAnchor")."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from detect.ops.anchors import (
    best_possible_recall,
    check_anchors,
    evolve_anchors,
    label_sizes,
)

TRUE_ANCHORS = np.array([[10.0, 12.0], [60.0, 40.0], [200.0, 300.0]], np.float32)
THRESHOLD = 0.25  # 1 / anchor_t 4.0


def sizes_around(anchors: np.ndarray, per_anchor: int, seed: int, sigma: float = 0.1) -> np.ndarray:
    """Label sizes scattered log-normally around each anchor."""
    rng = np.random.default_rng(seed)
    return np.concatenate([a * np.exp(rng.normal(0, sigma, (per_anchor, 2))) for a in anchors]).astype(np.float32)


def as_dataset(label_wh: np.ndarray, imgsz: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Square images of side imgsz, one label each, so label_sizes gives back label_wh (before the jitter)."""
    return np.full((len(label_wh), 2), imgsz, np.float64), [wh[None] / imgsz for wh in label_wh]


@pytest.mark.parametrize("kind", [np.array, torch.tensor])
def test_best_possible_recall_by_hand(kind) -> None:
    anchors = kind([[10.0, 10.0], [100.0, 50.0]])
    labels = kind([
        [10.0, 10.0],  # anchor 0 fits exactly (1.0); anchor 1: min(0.1, 0.2) = 0.1 -> 1 anchor
        [30.0, 10.0],  # anchor 0: min(1/3, 1) = 0.33; anchor 1: min(0.3, 0.2) -> 1 anchor
        [50.0, 100.0],  # anchor 0: 0.1; anchor 1: min(0.5, 1/2) = 0.5 -> 1 anchor
        [400.0, 400.0],  # 0.025 and 0.125: no anchor
        [30.0, 20.0],  # anchor 0: 1/3; anchor 1: min(0.3, 0.4) = 0.3 -> 2 anchors
        [40.0, 10.0],  # anchor 0: exactly 0.25, not above; anchor 1: 0.2 -> no anchor
    ])
    recall, per_label = best_possible_recall(anchors, labels, THRESHOLD)
    assert recall == pytest.approx(4 / 6)
    assert per_label == pytest.approx(5 / 6)


def test_label_sizes_scale_the_long_side_then_jitter_per_image() -> None:
    image_wh = np.array([[200, 100], [50, 100], [10, 10]])
    boxes = [np.array([[0.5, 0.5]]), np.array([[0.2, 0.1], [1.0, 1.0]]), np.zeros((0, 2))]
    plain = label_sizes(image_wh, boxes, imgsz=64)
    # Images become 64x32 and 32x64.
    assert np.allclose(plain, [[32.0, 16.0], [6.4, 6.4], [32.0, 64.0]])
    jittered = label_sizes(image_wh, boxes, 64, np.random.default_rng(0))
    factors = jittered / plain
    assert np.all((factors >= 0.9) & (factors <= 1.1))
    # One factor per image, the same for both sides and every box of the image.
    assert np.allclose(factors[1:], factors[1, 0]) and np.allclose(factors[0], factors[0, 0])
    assert factors[0, 0] != pytest.approx(factors[1, 0])
    assert np.array_equal(jittered, label_sizes(image_wh, boxes, 64, np.random.default_rng(0)))


def test_evolution_recovers_anchors_sorted_by_area() -> None:
    labels = sizes_around(TRUE_ANCHORS, 100, seed=0)
    found = evolve_anchors(labels, 3, 640, THRESHOLD, np.random.default_rng(1), generations=200)
    assert found.shape == (3, 2)
    assert np.all(np.diff(found.prod(axis=1)) > 0)
    assert np.allclose(found, TRUE_ANCHORS, rtol=0.15)
    assert best_possible_recall(found, labels, THRESHOLD)[0] >= best_possible_recall(TRUE_ANCHORS, labels, THRESHOLD)[0]


def test_evolution_is_deterministic_for_a_seed() -> None:
    labels = sizes_around(TRUE_ANCHORS, 50, seed=0, sigma=0.4)
    runs = [evolve_anchors(labels, 3, 640, THRESHOLD, np.random.default_rng(seed), generations=100)
            for seed in (5, 5, 6)]
    assert np.array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_labels_under_two_pixels_are_left_out(caplog) -> None:
    fit = sizes_around(TRUE_ANCHORS[:2], 100, seed=0)
    tiny = np.full((300, 2), 1.0, np.float32)  # both sides under 2 px: dropped
    thin = np.array([[1.5, 12.0]], np.float32)  # one side under 2 px: kept, as yolov5 does
    with caplog.at_level(logging.INFO, logger="detect.ops.anchors"):
        found = evolve_anchors(np.concatenate([fit, tiny, thin]), 2, 640, THRESHOLD, np.random.default_rng(0),
                               generations=0)
    assert "300 of 501 labels" in caplog.text
    # Had the 300 tiny labels stayed, k-means would have spent an anchor on them.
    assert np.allclose(found, TRUE_ANCHORS[:2], rtol=0.15)


def test_too_few_labels_for_kmeans_fall_back_to_random_anchors() -> None:
    labels = np.array([[30.0, 40.0], [50.0, 20.0]], np.float32)
    found = evolve_anchors(labels, 3, 64, THRESHOLD, np.random.default_rng(0), generations=0)
    # Random starting anchors: sorted uniform numbers times imgsz, sorted by area.
    assert found.shape == (3, 2) and np.all((found > 0) & (found < 64))
    assert np.all(np.diff(found.prod(axis=1)) >= 0)


def test_good_anchors_are_kept(caplog) -> None:
    image_wh, boxes = as_dataset(sizes_around(TRUE_ANCHORS, 100, seed=0), 640)
    with caplog.at_level(logging.INFO, logger="detect.ops.anchors"):
        result = check_anchors(TRUE_ANCHORS, image_wh, boxes, 640, 4.0, np.random.default_rng(0), generations=10)
    assert result is None
    assert "best possible recall 1.0000" in caplog.text and "kept" in caplog.text


def test_poor_anchors_are_replaced_by_better_ones() -> None:
    labels = sizes_around(TRUE_ANCHORS, 100, seed=0)
    image_wh, boxes = as_dataset(labels, 640)
    poor = torch.tensor([[5.0, 5.0], [8.0, 8.0], [11.0, 11.0]])  # only the smallest labels reach them
    old_recall, _ = best_possible_recall(poor, labels, THRESHOLD)
    assert old_recall < 0.98
    new = check_anchors(poor, image_wh, boxes, 640, 4.0, np.random.default_rng(0), generations=50)
    assert new is not None and new.shape == (3, 2)
    assert best_possible_recall(new, labels, THRESHOLD)[0] > old_recall
    assert np.all(np.diff(new.prod(axis=1)) > 0)


def test_no_labels_keep_the_anchors() -> None:
    result = check_anchors(TRUE_ANCHORS, np.array([[640, 480]]), [np.zeros((0, 2))], 640, 4.0,
                           np.random.default_rng(0))
    assert result is None
