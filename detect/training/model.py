"""The model a run trains: built from --cfg and/or --weights, layers frozen, anchors checked (AutoAnchor)."""

from __future__ import annotations

import logging

import numpy as np
import torch

from detect.data.records import ImageRecord
from detect.models import DetectionModel, build_model
from detect.models.weights import load_model
from detect.ops.anchors import check_anchors

LOGGER = logging.getLogger(__name__)


def build_train_model(cfg: str | None, weights: str | None, names: list[str]) -> DetectionModel:
    """A model for len(names) classes: --cfg's architecture (else the weights'), with every --weights tensor
    whose name and shape fit; the anchors come from the weights only when no --cfg is given (as yolov5)."""
    source = load_model(weights) if weights else None
    spec = cfg if cfg else source.spec
    model = build_model(spec, num_classes=len(names), names=list(names))
    if source is None:
        return model
    target = model.state_dict()
    fitting = {name: tensor for name, tensor in source.state_dict().items()
               if name in target and tensor.shape == target[name].shape and not (cfg and name.endswith("anchors"))}
    model.load_state_dict(fitting, strict=False)
    LOGGER.info("transferred %d/%d tensors from %s", len(fitting), len(target), weights)
    return model


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


def autoanchor(model: DetectionModel, records: list[ImageRecord], imgsz: int, anchor_threshold: float,
               seed: int) -> bool:
    """Replace the model's anchors in place when AutoAnchor finds better ones for these labels; True if it did."""
    detect = model.detect
    strides = detect.stride.view(-1, 1, 1)
    anchors_px = (detect.anchors * strides).view(-1, 2).cpu().numpy()
    image_wh = np.array([[record.width, record.height] for record in records], np.float64)
    boxes_wh = [record.train_boxes[1][:, 2:4] for record in records]
    new = check_anchors(anchors_px, image_wh, boxes_wh, imgsz, anchor_threshold, np.random.default_rng(seed))
    if new is None:
        return False
    new_anchors = torch.as_tensor(np.asarray(new), dtype=detect.anchors.dtype, device=detect.anchors.device)
    with torch.no_grad():
        detect.anchors.copy_(new_anchors.view_as(detect.anchors) / strides)
    return True
