"""The served model: predict's Detector (every format val and predict read), an upload letterboxed as predict does,
a batch of them in one model call (the Detector's batch call), and each image's own thresholds applied after it."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from detect.data.images.letterbox import PAD_VALUE, LetterboxInfo
from detect.inference.detector import Detector, Letterboxed, PredictSettings
from detect.inference.slicing import TooManyWindows
from detect.serve.settings import ServeSettings
from detect.serve.uploads import Refused, decode_upload

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """One request's NMS settings (the query's conf, iou, max_det, classes; the service's defaults otherwise)."""

    conf: float
    iou: float
    max_det: int
    classes: tuple[int, ...] | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str], defaults: Thresholds, num_classes: int) -> Thresholds:
        """The query's values over `defaults`; Refused (400) naming a bad one."""
        values = {"conf": defaults.conf, "iou": defaults.iou, "max_det": defaults.max_det, "classes": defaults.classes}
        try:
            for name in ("conf", "iou"):
                if name in query:
                    values[name] = float(query[name])
                    if not 0 <= values[name] <= 1:
                        raise ValueError
            if "max_det" in query:
                values["max_det"] = int(query["max_det"])
                if not 1 <= values["max_det"] <= defaults.max_det:
                    raise ValueError
            if query.get("classes", "").strip():
                values["classes"] = tuple(sorted({int(text) for text in query["classes"].split(",")}))
                if not all(0 <= k < num_classes for k in values["classes"]):
                    raise ValueError
        except ValueError:
            raise Refused(400, f"bad query {dict(query)}: conf and iou are numbers in [0, 1], max_det an integer in "
                               f"[1, {defaults.max_det}], classes comma-separated indices below {num_classes}") from None
        return cls(**values)

    def applied_to(self, settings: PredictSettings) -> PredictSettings:
        """`settings` with these thresholds."""
        return dataclasses.replace(settings, conf_threshold=self.conf, iou_threshold=self.iou, max_det=self.max_det,
                                   classes=self.classes)


@dataclasses.dataclass(frozen=True)
class Found:
    """One image's answer: (n, 6) [x1, y1, x2, y2, score, class] in its own pixels, its batch's size, and the time
    the batch took to make and run (its NMS after); `windows`: the inputs it ran as (sliced: its windows)."""

    rows: torch.Tensor
    batch_size: int
    inference_ms: float
    windows: int = 1


class ServedModel:
    """A model loaded once; `prepare` runs in the decoding threads, `run` in the one inference thread."""

    def __init__(self, settings: ServeSettings) -> None:
        self.detector = Detector(settings.weights, settings.device, settings.predict_settings())
        model = self.detector.model
        self.static_batch = model.batch
        self.max_batch = self.static_batch or settings.max_batch
        if self.static_batch and self.static_batch != settings.max_batch:
            LOGGER.info("the model's batch is static at %d (not --max-batch %d): shorter batches are padded to it",
                        self.static_batch, settings.max_batch)
        self.max_pixels = settings.max_pixels
        self.name = Path(settings.weights).name
        self.format = model.format
        detector_settings = self.detector.settings
        self.defaults = Thresholds(detector_settings.conf_threshold, detector_settings.iou_threshold,
                                   detector_settings.max_det)

    @property
    def names(self) -> tuple[str, ...]:
        return self.detector.names

    def describe(self) -> dict:
        """What GET /v1/model answers."""
        return {"model": self.name, "format": self.format, "names": list(self.names),
                "imgsz": list(self.detector.settings.imgsz), "stride": self.detector.model.stride,
                "batch": {"max": self.max_batch, "static": self.static_batch},
                "nms_in_graph": self.detector.model.nms is not None,
                "defaults": dataclasses.asdict(self.defaults)}

    def prepare(self, data: bytes) -> Letterboxed:
        """Decode and letterbox one upload (predict's input for it alone); Refused for a bad one."""
        image = decode_upload(data, self.max_pixels)
        if self.detector.sliced is not None:  # the inference thread cuts its windows: their count checked here
            try:
                self.detector.sliced.check(*image.shape[:2])
            except TooManyWindows as error:
                raise Refused(413, f"the image {error}") from None
        return self.detector.prepare(image)

    def run(self, images: Sequence[Letterboxed], thresholds: Sequence[Thresholds]) -> list[Found]:
        """One model call for a batch of images of one shape (the batcher's), then each image's NMS at its own
        thresholds; a static export pads the batch itself (ExportedModel). Sliced: each image's windows, a batch of
        them a call."""
        start = time.perf_counter()
        if self.detector.sliced is not None:
            return [self._sliced(image, wanted, start) for image, wanted in zip(images, thresholds)]
        outputs = self.detector.predict_batch(images)
        inference_ms = 1000 * (time.perf_counter() - start)
        found = []
        for index, (image, wanted) in enumerate(zip(images, thresholds)):
            settings = wanted.applied_to(self.detector.settings)
            (detections,) = self.detector.detections(outputs[index:index + 1], [image], settings)
            found.append(Found(detections.rows, len(images), inference_ms))
        return found

    def _sliced(self, image: Letterboxed, wanted: Thresholds, start: float) -> Found:
        """One image's answer by sliced inference (inference/slicing)."""
        rows = self.detector.sliced.detect(image.pixels, conf_threshold=wanted.conf, iou_threshold=wanted.iou,
                                           max_det=wanted.max_det, classes=wanted.classes, multi_label=False)
        windows = self.detector.sliced.window_count(*image.pixels.shape[:2])
        return Found(rows, 1, 1000 * (time.perf_counter() - start), windows)

    def warm_up(self) -> None:
        """Run a full batch and a single image of blank inputs, so the first requests do not pay for set-up."""
        height, width = self.detector.input_shape([self.detector.settings.imgsz])
        blank = Letterboxed(np.full((height, width, 3), PAD_VALUE, np.uint8),
                            LetterboxInfo((height, width), 1.0, (0, 0)))
        for size in sorted({self.max_batch, 1}, reverse=True):
            self.run([blank] * size, [self.defaults] * size)
