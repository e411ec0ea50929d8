"""yolov5's AutoShape on a Detector: what torch.hub.load returns."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Hashable, Sequence
from pathlib import Path

import torch
from torch import nn

from detect.hub.images import ImageLike, to_bgr
from detect.hub.results import HubResults
from detect.inference.detector import Detector, PredictSettings
from detect.inference.slicing import SlicedPredictor, SliceSettings
from detect.inference.tracks.streams import Tracks


class HubModel(nn.Module):
    """yolov5's AutoShape on a Detector: images (paths, PIL, RGB numpy, or a list of them) give HubResults after NMS;
    a (B, 3, H, W) float tensor in [0, 1] gives the decoded predictions (B, N, 5+nc) as they are, so the model can be
    traced. yolov5's attributes conf, iou, agnostic, multi_label, classes, max_det and amp are read at each call, and
    ours, slice and slice_overlap: with `slice`, each image runs as windows of its full resolution, not fitted into
    `size` (inference/slicing)."""

    conf = PredictSettings.conf_threshold
    iou = PredictSettings.iou_threshold
    agnostic = PredictSettings.agnostic
    multi_label = PredictSettings.multi_label  # every class above conf per box, as validation scores
    classes: Sequence[int] | None = None
    max_det = PredictSettings.max_det
    amp = False  # fp16 autocast on an accelerator (yolov5's AMP inference); the CPU stays fp32, as yolov5's
    slice: int | None = None  # ours: windows of this many pixels of the full-resolution image (sliced inference)
    slice_overlap = 0.2  # ours: the windows' overlap, a share of `slice`

    def __init__(self, detector: Detector) -> None:
        super().__init__()
        self.detector = detector
        network = getattr(detector.model, "model", None)
        if isinstance(network, nn.Module):  # registered, so parameters(), state_dict() and jit.trace see it
            self.model = network
        self.names = dict(enumerate(detector.names))
        self.nc, self.stride = len(self.names), detector.model.stride

    def _autocast(self) -> contextlib.AbstractContextManager:
        device = self.detector.backend.device
        if not self.amp or device.type == "cpu":
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=torch.float16)

    def forward(self, ims: ImageLike | torch.Tensor | Sequence[ImageLike], size: int | Sequence[int] = 640,
                augment: bool = False) -> HubResults | torch.Tensor:
        """Detections of one image or a list of them, their long side resized to `size`; or a tensor's predictions."""
        detector = self.detector
        detector.augment = augment
        if isinstance(ims, torch.Tensor):
            with self._autocast():
                return detector.predict(detector.backend.to_device(ims))
        start = time.perf_counter()
        inputs = list(ims) if isinstance(ims, (list, tuple)) else [ims]
        files, images = zip(*(to_bgr(image, index) for index, image in enumerate(inputs))) if inputs else ((), ())
        self._configure(size)
        with self._autocast():
            found = detector(list(images)) if images else []
        milliseconds = 1000 * (time.perf_counter() - start) / max(len(images), 1)
        return HubResults(list(images), found, list(files), self.names, milliseconds)

    def _configure(self, size: int | Sequence[int]) -> None:
        """The detector set to this model's attributes (read at each call, as yolov5's) and `size`."""
        detector = self.detector
        side = max(size) if isinstance(size, Sequence) else size  # yolov5 scales by the larger side too
        detector.settings = dataclasses.replace(
            detector.settings, imgsz=(side, side), conf_threshold=self.conf, iou_threshold=self.iou,
            classes=None if self.classes is None else tuple(self.classes), max_det=self.max_det,
            agnostic=self.agnostic, multi_label=self.multi_label)
        detector.sliced = None if self.slice is None else SlicedPredictor(
            detector.predictor, detector.backend, SliceSettings(self.slice, self.slice_overlap), detector.model.stride)

    def track(self, im: ImageLike, stream: Hashable = 0, tracker: str | Path = "bytetrack",
              size: int | Sequence[int] = 640) -> Tracks:
        """One frame of `stream` tracked (ours; ultralytics' model.track with persist=True): its detections at this
        model's attributes fed to that stream's tracker (bytetrack, ocsort, botsort or a yaml), ids kept between
        calls; reset_tracks(stream) starts it afresh. model.conf = 0.1 gives ByteTrack's second stage its weak boxes, as
        python -m detect.track does."""
        self._configure(size)
        with self._autocast():
            return self.detector.track(to_bgr(im, 0)[1], stream, tracker)

    def reset_tracks(self, stream: Hashable | None = None) -> None:
        """Forget one stream's tracks, or every stream's (None)."""
        self.detector.reset_tracks(stream)
