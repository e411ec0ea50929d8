"""AutoAnchor: how well anchors fit the label sizes, and k-means + evolution of better ones
(docs/yolov5.md, "AutoAnchor").

Sizes are (width, height) in pixels at the training image size. The fit of a label to an anchor is
min over both sides of min(r, 1/r), r = label side / anchor side; a label is reachable by an anchor when that
fit is above `threshold` = 1 / anchor_t (0.25 for yolov5's anchor_t 4.0).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

LOGGER = logging.getLogger(__name__)

# Constants of yolov5's AutoAnchor (docs/yolov5.md, "AutoAnchor").
GOOD_RECALL = 0.98  # a best possible recall above this keeps the anchors
SIZE_JITTER = (0.9, 1.1)  # per-image scale on the label sizes the recall is measured on
MIN_LABEL_PX = 2.0  # labels with both sides under this are left out of the fit
MIN_ANCHOR_PX = 2.0
KMEANS_RUNS = 30  # restarts from random labels; the run with the lowest distortion wins
KMEANS_TOLERANCE = 1e-5  # a run stops when its mean distance improves by no more than this
MUTATION_PROBABILITY = 0.9
MUTATION_SIGMA = 0.1
MUTATION_RANGE = (0.3, 3.0)


def _pixels(sizes: torch.Tensor | np.ndarray) -> np.ndarray:
    """(n, 2) float32 numpy array from a tensor or array."""
    if isinstance(sizes, torch.Tensor):
        sizes = sizes.detach().cpu().numpy()
    return np.asarray(sizes, dtype=np.float32).reshape(-1, 2)


def anchor_fit(anchors: np.ndarray, label_wh: np.ndarray) -> np.ndarray:
    """(n, K) fit of each label to each anchor: min over w, h of min(r, 1/r), r = label / anchor."""
    ratio = label_wh[:, None, :] / anchors[None, :, :]
    return np.minimum(ratio, 1 / ratio).min(axis=2)


def best_possible_recall(anchors: torch.Tensor | np.ndarray, label_wh: torch.Tensor | np.ndarray,
                         threshold: float) -> tuple[float, float]:
    """(fraction of labels whose best anchor fits above threshold, mean anchors above threshold per label)."""
    fit = anchor_fit(_pixels(anchors), _pixels(label_wh))
    if not len(fit):
        return 0.0, 0.0
    return float((fit.max(axis=1) > threshold).mean()), float((fit > threshold).sum(axis=1).mean())


def label_sizes(image_wh: np.ndarray, boxes_wh: list[np.ndarray], imgsz: int,
                rng: np.random.Generator | None = None) -> np.ndarray:
    """(n, 2) label sizes in pixels with each image's long side at imgsz, times U(0.9, 1.1) per image given rng.

    image_wh: (N, 2) image widths and heights in pixels; boxes_wh[i]: (n_i, 2) normalised box sizes of image i.
    """
    image_wh = np.asarray(image_wh, dtype=np.float64).reshape(-1, 2)
    shapes = imgsz * image_wh / image_wh.max(axis=1, keepdims=True)
    if rng is not None:
        shapes = shapes * rng.uniform(*SIZE_JITTER, size=(len(shapes), 1))
    sizes = [np.asarray(boxes, dtype=np.float64).reshape(-1, 2) * shape for shape, boxes in zip(shapes, boxes_wh)]
    return np.concatenate(sizes).astype(np.float32) if sizes else np.zeros((0, 2), np.float32)


def _lloyd(points: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, float]:
    """One k-means run from `centres` until the mean distance stops improving; empty clusters are dropped."""
    previous = np.inf
    while True:
        distances = np.linalg.norm(points[:, None, :] - centres[None, :, :], axis=2)
        nearest = distances.argmin(axis=1)
        distortion = float(distances[np.arange(len(points)), nearest].mean())
        counts = np.bincount(nearest, minlength=len(centres))
        sums = np.stack([np.bincount(nearest, points[:, dim], len(centres)) for dim in range(2)], axis=1)
        centres = sums[counts > 0] / counts[counts > 0, None]
        if abs(previous - distortion) <= KMEANS_TOLERANCE:
            return centres, distortion
        previous = distortion


def kmeans_anchors(label_wh: np.ndarray, num_anchors: int, rng: np.random.Generator) -> np.ndarray | None:
    """K-means of the sizes whitened by their standard deviation, best of 30 runs; None if it finds fewer."""
    scale = label_wh.std(axis=0)
    if len(label_wh) < num_anchors or not (scale > 0).all():
        return None
    points = label_wh / scale
    best, best_distortion = None, np.inf
    for _ in range(KMEANS_RUNS):
        start = points[rng.choice(len(points), num_anchors, replace=False)]
        centres, distortion = _lloyd(points, start)
        if distortion < best_distortion:
            best, best_distortion = centres, distortion
    # Like scipy.cluster.vq.kmeans (what yolov5 calls), a run may lose clusters; then it falls back to random.
    return best * scale if best is not None and len(best) == num_anchors else None


def _fitness(anchors: np.ndarray, label_wh: np.ndarray, threshold: float) -> float:
    """mean(best * (best > threshold)), best = each label's best fit: what evolution maximises."""
    if not len(label_wh):
        return 0.0
    best = anchor_fit(anchors, label_wh).max(axis=1)
    return float((best * (best > threshold)).mean())


def _by_area(anchors: np.ndarray) -> np.ndarray:
    return anchors[np.argsort(anchors.prod(axis=1), kind="stable")]


def evolve_anchors(label_wh: np.ndarray, num_anchors: int, imgsz: int, threshold: float,
                   rng: np.random.Generator, generations: int = 1000) -> np.ndarray:
    """(K, 2) anchors in pixels, sorted by area: k-means of the label sizes, then mutations that raise fitness."""
    label_wh = _pixels(label_wh)
    kept = label_wh[(label_wh >= MIN_LABEL_PX).any(axis=1)]  # yolov5 keeps a label when either side is >= 2 px
    if len(kept) < len(label_wh):
        LOGGER.info("AutoAnchor: %d of %d labels are under %g px and left out", len(label_wh) - len(kept),
                    len(label_wh), MIN_LABEL_PX)
    anchors = kmeans_anchors(kept, num_anchors, rng)
    if anchors is None:
        anchors = np.sort(rng.random(num_anchors * 2)).reshape(num_anchors, 2) * imgsz
    anchors = _by_area(anchors.astype(np.float32))
    fitness = _fitness(anchors, kept, threshold)
    for _ in range(generations):
        factor = np.ones_like(anchors)
        while (factor == 1).all():  # draw again until something changes
            mutate = rng.random(anchors.shape) < MUTATION_PROBABILITY
            # A per-generation uniform factor scales the step, as in yolov5: sigma is an upper bound.
            step = mutate * rng.random() * rng.standard_normal(anchors.shape) * MUTATION_SIGMA
            factor = (step + 1).clip(*MUTATION_RANGE)
        candidate = (anchors * factor).clip(min=MIN_ANCHOR_PX).astype(np.float32)
        candidate_fitness = _fitness(candidate, kept, threshold)
        if candidate_fitness > fitness:
            anchors, fitness = candidate, candidate_fitness
    return _by_area(anchors)


def check_anchors(anchors_px: torch.Tensor | np.ndarray, image_wh: np.ndarray, boxes_wh: list[np.ndarray],
                  imgsz: int, anchor_threshold: float, rng: np.random.Generator,
                  generations: int = 1000) -> np.ndarray | None:
    """Better (K, 2) pixel anchors for these labels, or None to keep the current ones (recall > 0.98 or no gain).

    anchor_threshold is the hyp's anchor_t (4.0); the labels are given as for label_sizes.
    """
    threshold = 1 / anchor_threshold
    jittered = label_sizes(image_wh, boxes_wh, imgsz, rng)
    if not len(jittered):
        LOGGER.info("AutoAnchor: no labels, anchors kept")
        return None
    recall, per_label = best_possible_recall(anchors_px, jittered, threshold)
    summary = f"AutoAnchor: {per_label:.2f} anchors/target, best possible recall {recall:.4f}"
    if recall > GOOD_RECALL:
        LOGGER.info("%s: anchors kept", summary)
        return None
    # The evolution fits the sizes without the jitter; the new recall is measured on the jittered ones (yolov5).
    new = evolve_anchors(label_sizes(image_wh, boxes_wh, imgsz), len(_pixels(anchors_px)), imgsz, threshold, rng,
                         generations)
    new_recall, _ = best_possible_recall(new, jittered, threshold)
    if new_recall > recall:
        LOGGER.info("%s: replaced by evolved anchors (best possible recall %.4f)", summary, new_recall)
        return new
    LOGGER.info("%s: evolved anchors no better (%.4f), anchors kept", summary, new_recall)
    return None
