"""A new training run's model, from plain values: what it is made from (`ModelSource`: a yaml's architecture, else the
weights', and the weights' tensors that fit), the layers kept frozen, and AutoAnchor's anchors for the labels' sizes
(the training set-up resolves the settings into these values: training/setup/recipe.py)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import torch

from detect.models.spec import ModelSpec, load_model_spec, with_anchors_per_level
from detect.models.weights import load_model
from detect.models.yolo import DetectionModel
from detect.ops.anchors import check_anchors, evolve_anchors, label_sizes

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """A new run's model, built before anything is written: the yaml's architecture (else the weights'), for the
    data's classes, holding every weights tensor whose name and shape fit."""

    spec: ModelSpec
    model: DetectionModel
    anchors_to_compute: bool  # the yaml (or the hyp) says `anchors: N`, a number per level: AutoAnchor computes them

    @classmethod
    def read(cls, cfg: str | None, weights: str | None, anchors_per_level: float, names: list[str]) -> ModelSource:
        """Parse the model yaml `cfg`, load `weights` (a bad one is a UserError naming it) and build the model for
        `names`; `anchors_per_level` (a hyp's `anchors`, 0: none) replaces the architecture's anchors by that many
        for AutoAnchor. Without a yaml the weights' anchors are taken too (as yolov5)."""
        loaded = load_model(weights) if weights else None
        spec = with_anchors_per_level(load_model_spec(cfg) if cfg else loaded.spec, anchors_per_level)
        anchors_from_weights = cfg is None and not anchors_per_level
        model = DetectionModel(spec, len(names), list(names))
        if loaded is not None:
            target = model.state_dict()
            fitting = {name: tensor for name, tensor in loaded.state_dict().items()
                       if name in target and tensor.shape == target[name].shape
                       and (anchors_from_weights or not name.endswith("anchors"))}
            model.load_state_dict(fitting, strict=False)
            LOGGER.info("transferred %d/%d tensors from %s", len(fitting), len(target), weights)
        return cls(spec, model, isinstance(spec.anchors, int) and not anchors_from_weights)


def freeze_layers(model: DetectionModel, freeze: tuple[int, ...]) -> int:
    """Stop gradients into layers: (n,) freezes layers 0..n-1, several numbers freeze those layers (yolov5's
    --freeze); returns how many parameters were frozen."""
    layers = range(freeze[0]) if len(freeze) == 1 else freeze
    prefixes = tuple(f"model.{layer}." for layer in layers)
    frozen = 0
    for name, parameter in model.named_parameters():
        parameter.requires_grad = not name.startswith(prefixes)
        frozen += not parameter.requires_grad
    if frozen:
        LOGGER.info("froze %d parameter tensors (layers %s)", frozen, list(layers))
    return frozen


@dataclasses.dataclass(frozen=True)
class AnchorFit:
    """How AutoAnchor fits anchors to the labels: at the training image size, yolov5's anchor-to-box ratio threshold
    (hyp anchor_t), seeded; `compute`: the model holds placeholders (ModelSource.anchors_to_compute)."""

    imgsz: int
    threshold: float
    seed: int
    compute: bool = False


def autoanchor(model: DetectionModel, image_wh: np.ndarray, boxes_wh: list[np.ndarray], fit: AnchorFit) -> bool:
    """Replace the model's anchors in place when AutoAnchor finds better ones for boxes of sizes `boxes_wh` (one
    (n, 2) array of normalised widths and heights per image) in images of `image_wh` (m, 2) pixels (always when
    `fit.compute`); True if it did."""
    detect = model.detect
    strides = detect.stride.view(-1, 1, 1)
    rng = np.random.default_rng(fit.seed)
    if fit.compute:  # as yolov5, whose placeholders never pass the recall check: k-means + evolution straight away
        new = evolve_anchors(label_sizes(image_wh, boxes_wh, fit.imgsz), detect.nl * detect.na, fit.imgsz,
                             1 / fit.threshold, rng)
        LOGGER.info("AutoAnchor: the model yaml or hyp asks for %d anchors per level: computed from the labels by "
                    "k-means and evolution", detect.na)
    else:
        anchors_px = (detect.anchors * strides).view(-1, 2).cpu().numpy()
        new = check_anchors(anchors_px, image_wh, boxes_wh, fit.imgsz, fit.threshold, rng)
    if new is None:
        return False
    new_anchors = torch.as_tensor(np.asarray(new), dtype=detect.anchors.dtype, device=detect.anchors.device)
    with torch.no_grad():
        detect.anchors.copy_(new_anchors.view_as(detect.anchors) / strides)
    return True
