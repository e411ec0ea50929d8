"""Stand-ins for the checkpoints of yolov5's other tasks (v7.0 on), made without yolov5's code.

segment/train.py saves a models.yolo.SegmentationModel: the detection network with a Segment head (a Detect that
also predicts mask coefficients, with a Proto module under `proto` and `detect = Detect.forward`, a function that
pickle protocol 2 writes as getattr(models.yolo.Detect, 'forward')). classify/train.py saves a
models.yolo.ClassificationModel: the backbone cut at layer 10, its last layer a models.common.Classify head (Conv,
AdaptiveAvgPool2d, Dropout, Linear), no yaml; `ema` None, `model` the EMA weights.
"""

from __future__ import annotations

import copy
import types
from pathlib import Path

import torch
from torch import nn

from tests.models.yolov5_standins import (
    VERSIONS,
    _as_yolov5,
    _standin_class,
    seeded_model,
    yolov5_module_names,
    yolov5_yaml,
)

NAMES = ("cat", "dog", "bird")


def _detect_forward(registry: dict[str, types.ModuleType]):
    """A function that pickles as models.yolo.Detect.forward, as Segment.detect does."""
    detect = _standin_class("models.yolo", "Detect", registry)

    def forward(self, x):
        return x

    forward.__module__, forward.__qualname__ = "models.yolo", "Detect.forward"
    detect.forward = forward
    return forward


def _conv(channels_in: int, channels_out: int, registry: dict[str, types.ModuleType]) -> nn.Module:
    """A models.common.Conv stand-in: conv, bn, act."""
    conv = _standin_class("models.common", "Conv", registry)()
    conv.conv = nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False)
    conv.bn, conv.act = nn.BatchNorm2d(channels_out), nn.SiLU()
    return conv


def _segmentation(model: nn.Module, registry: dict[str, types.ModuleType]) -> nn.Module:
    """The stand-in detection model made a SegmentationModel: Segment head with 32 masks and a Proto."""
    head = model.model[-1]
    masks, protos, channels = 32, 64, head.m[0].in_channels
    head.__class__ = _standin_class("models.yolo", "Segment", registry)
    head.nm, head.npr, head.no = masks, protos, 5 + len(NAMES) + masks
    head.m = nn.ModuleList(nn.Conv2d(conv.in_channels, head.no * head.na, 1) for conv in head.m)
    proto = _standin_class("models.common", "Proto", registry)()
    proto.cv1, proto.upsample = _conv(channels, protos, registry), nn.Upsample(scale_factor=2.0, mode="nearest")
    proto.cv2, proto.cv3 = _conv(protos, protos, registry), _conv(protos, masks, registry)
    head.proto, head.detect = proto, _detect_forward(registry)
    model.__class__ = _standin_class("models.yolo", "SegmentationModel", registry)
    return model


def _classification(model: nn.Module, registry: dict[str, types.ModuleType]) -> nn.Module:
    """ClassificationModel._from_detection_model: layers 0-9, the 10th replaced by a Classify head; no yaml."""
    layers = model.model[:10]
    last = layers[-1]
    classify = _standin_class("models.common", "Classify", registry)()
    classify.conv = _conv(last.cv1.conv.in_channels, 1280, registry)
    classify.pool, classify.drop = nn.AdaptiveAvgPool2d(1), nn.Dropout(p=0.0, inplace=True)
    classify.linear = nn.Linear(1280, len(NAMES))
    classify.i, classify.f, classify.type = last.i, last.f, "models.common.Classify"
    layers[-1] = classify
    classifier = _standin_class("models.yolo", "ClassificationModel", registry)()
    classifier.model, classifier.stride, classifier.save, classifier.nc = layers, model.stride, [], len(NAMES)
    classifier.names = dict(enumerate(NAMES))
    return classifier


def task_checkpoint(path: Path, task: str) -> None:
    """Write `path` as yolov5 v7.0's segment/train.py ('segmentation') or classify/train.py ('classification')."""
    version = VERSIONS["v7.0"]
    yaml = yolov5_yaml("v7.0", "n", len(NAMES))
    registry: dict[str, types.ModuleType] = {}
    detection = _as_yolov5(seeded_model(yaml, list(NAMES), version.csp_activation).train(), version, yaml, registry)
    if task == "segmentation":
        model = _segmentation(detection, registry).half()
        payload = {"model": copy.deepcopy(model), "ema": model}
    else:
        payload = {"model": _classification(detection, registry).half(), "ema": None}
    payload.update(epoch=2, best_fitness=0.5, updates=24, optimizer=None, opt={"imgsz": 224}, date="2026-12-05")
    with yolov5_module_names(registry):
        torch.save(payload, path)
