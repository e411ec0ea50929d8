"""The predict API: load a model once, call it on images (BGR arrays as cv2 reads them, or paths), get detections."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Hashable, Sequence
from pathlib import Path

import cv2
import numpy as np
import torch

from detect import backend as backends
from detect.config import IMAGE_SIZE
from detect.data.images.letterbox import LetterboxInfo, boxes_to_original, fitted_size, letterbox
from detect.data.images.load import read_failure
from detect.errors import UserError
from detect.inference.exported import ExportedModel
from detect.inference.media import load_image
from detect.inference.model import InferenceModel, Weights, load_inference_model
from detect.inference.predictor import Predictor
from detect.inference.slicing import SlicedPredictor, SliceSettings
from detect.inference.tracks.settings import TrackerSettings, as_tracker_settings
from detect.inference.tracks.streams import StreamTrackers, Tracks
from detect.inference.tta import augment_model

LOGGER = logging.getLogger(__name__)
ImageInput = np.ndarray | str | Path


@dataclasses.dataclass(frozen=True)
class PredictSettings:
    """Input size (h, w) and NMS settings; the defaults are yolov5's detect.py ones."""

    imgsz: tuple[int, int] = (640, 640)
    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_det: int = 1000
    classes: tuple[int, ...] | None = None  # keep only these classes
    agnostic: bool = False  # NMS across classes
    multi_label: bool = False  # each box once per class above conf_threshold, as validation; off in yolov5's detect
    slicing: SliceSettings | None = None  # windows of the full-resolution image instead of it fitted into imgsz
    nms_device: str = "device"  # "cpu": NMS on the host (backends.NMS_DEVICE_HELP)

    def __post_init__(self) -> None:
        if not all(IMAGE_SIZE.accept(side) for side in self.imgsz):
            raise UserError(f"image size {' x '.join(map(str, self.imgsz))}: each side must be {IMAGE_SIZE.what}")


@dataclasses.dataclass(frozen=True)
class Detections:
    """One image's detections in its own pixels, best first; `input_size` is the (h, w) the network saw."""

    rows: torch.Tensor  # (n, 6) [x1, y1, x2, y2, score, class], float32, on the CPU
    names: tuple[str, ...]
    input_size: tuple[int, int]

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def boxes(self) -> np.ndarray:
        """(n, 4) float32 [x1, y1, x2, y2] in the original image's pixels."""
        return self.rows[:, :4].numpy()

    @property
    def scores(self) -> np.ndarray:
        """(n,) float32 scores (objectness x class probability)."""
        return self.rows[:, 4].numpy()

    @property
    def classes(self) -> np.ndarray:
        """(n,) int64 class indices into `names`."""
        return self.rows[:, 5].long().numpy()

    def counts(self) -> dict[str, int]:
        """Detections per class name, in class order."""
        counts = np.bincount(self.classes, minlength=len(self.names))
        return {self.names[index]: int(count) for index, count in enumerate(counts) if count}


@dataclasses.dataclass(frozen=True)
class Letterboxed:
    """One image made ready for a batch: RGB (h, w, 3) uint8 letterboxed to the batch's input shape, and how to undo
    the letterbox."""

    pixels: np.ndarray
    info: LetterboxInfo


class Detector:
    """A model loaded once on a device (ours, a yolov5 .pt or any export val reads; several .pt paths: one ensemble
    whose members' predictions meet in one NMS, as yolov5's; or a model object: a DetectionModel in memory, or one that
    load_inference_model loaded); call it on images. `augment` runs yolov5's test-time augmentation (inference/tta.py;
    PyTorch weights only).

        detector = Detector("yolov5n.pt", device="cpu")
        for found in detector(["bus.jpg", cv2.imread("zidane.jpg")]):
            print(found.boxes, found.scores, [found.names[c] for c in found.classes])

    A call is three steps that a caller with batches of its own (serve) takes one by one: `prepare` each image,
    `predict_batch` on images of one shape, then `detections` of its outputs.
    """

    def __init__(self, weights: Weights, device: str = "auto",
                 settings: PredictSettings = PredictSettings(), half: bool = False, augment: bool = False) -> None:
        self.backend = backends.select(device, amp=False, nms_device=settings.nms_device)
        if half and self.backend.device.type == "cpu":
            LOGGER.warning("--half: fp16 needs an accelerator; predicting in fp32 on the CPU (as yolov5 does)")
            half = False
        self.backend.set_device()
        self.model: InferenceModel = load_inference_model(weights, self.backend, half)
        self.augment = augment
        if augment:
            augment_model(self.model)  # an export is refused now, before any image
        if settings.classes and max(settings.classes) >= len(self.model.names):
            raise UserError(f"--classes {max(settings.classes)}: the model has {len(self.model.names)} classes")
        self.settings = dataclasses.replace(settings, imgsz=self._input_limit(settings.imgsz))
        self.sliced = None
        if settings.slicing is not None:
            if self.model.fixed_shape is not None:
                raise UserError(f"--slice runs windows of {settings.slicing.size} px: this export is static at "
                                f"{self.model.fixed_shape}; export it --dynamic, or slice at its size")
            self.sliced = SlicedPredictor(self.predictor, self.backend, settings.slicing, self.model.stride)
        self.tracking = StreamTrackers(self.names)

    @property
    def names(self) -> tuple[str, ...]:
        return self.model.names

    @property
    def predictor(self) -> Predictor:
        """The model's predict, test-time augmented when asked."""
        return augment_model(self.model) if self.augment else Predictor(self.model, self.model.nms)

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """The model's outputs (inference/model.py's contract), test-time augmented when asked."""
        return self.predictor(images)

    def _input_limit(self, imgsz: tuple[int, int]) -> tuple[int, int]:
        """imgsz rounded up to the stride (as yolov5 does, with a note), or a static export's own shape."""
        fixed = self.model.fixed_shape
        if fixed is not None:
            if fixed != tuple(imgsz):
                LOGGER.info("the model is static at %dx%d: predicting at that size", *fixed)
            return fixed
        stride = self.model.stride
        rounded = tuple(math.ceil(side / stride) * stride for side in imgsz)
        if rounded != tuple(imgsz):
            LOGGER.warning("--imgsz %s is not a multiple of the stride %d: using %s", list(imgsz), stride, list(rounded))
        return rounded

    def input_shape(self, sizes: Sequence[tuple[int, int]]) -> tuple[int, int]:
        """The batch's (h, w): a static export's own, else the smallest multiple of the stride that holds every image
        scaled to fit imgsz (yolov5's minimal rectangle)."""
        if self.model.fixed_shape is not None:
            return self.model.fixed_shape
        limit_h, limit_w = self.settings.imgsz
        stride, height, width = self.model.stride, 0, 0
        for image_h, image_w in sizes:
            fitted_h, fitted_w = fitted_size(image_h, image_w, min(limit_h / image_h, limit_w / image_w))
            height = max(height, math.ceil(fitted_h / stride) * stride)
            width = max(width, math.ceil(fitted_w / stride) * stride)
        return height, width

    def prepare(self, image: np.ndarray, shape: tuple[int, int] | None = None) -> Letterboxed:
        """A (h, w, 3) uint8 BGR image letterboxed to `shape` (default: its own input shape, as predict takes an
        image alone), in RGB; sliced, the image as it is (its windows are cut when it is run)."""
        if self.sliced is not None:
            return Letterboxed(cv2.cvtColor(image, cv2.COLOR_BGR2RGB), LetterboxInfo(image.shape[:2], 1.0, (0.0, 0.0)))
        shape = shape or self.input_shape([image.shape[:2]])
        fitted, ratio, pad = letterbox(image, shape, scale_up=True)
        return Letterboxed(cv2.cvtColor(fitted, cv2.COLOR_BGR2RGB), LetterboxInfo(image.shape[:2], ratio, pad))

    def predict_batch(self, images: Sequence[Letterboxed]) -> torch.Tensor:
        """The model's outputs for images prepared to one shape, in one call (a static export cuts the batch into its
        batch size and pads the last part itself: ExportedModel)."""
        pixels = np.stack([image.pixels for image in images])  # (B, H, W, 3)
        if isinstance(self.model, ExportedModel):
            # An export reads contiguous float32 (B, 3, H, W): made in two passes, not the three of float() / 255 and
            # the export's copy to contiguous (the same values, a fraction of the time: docs/benchmarks.md, "Figures
            # behind constants").
            array = np.divide(np.ascontiguousarray(pixels.transpose(0, 3, 1, 2)), np.float32(255), dtype=np.float32)
            tensor = self.backend.to_device(torch.from_numpy(array))
        else:  # (B, 3, H, W) stored channels-last, as stack_images makes a loader's batch
            tensor = self.backend.to_device(torch.from_numpy(pixels).permute(0, 3, 1, 2)).float().div_(255)
        return self.predictor(tensor)

    def detections(self, outputs: torch.Tensor, images: Sequence[Letterboxed],
                   settings: PredictSettings | None = None) -> list[Detections]:
        """Each image's detections in its own pixels, from predict_batch's `outputs` for `images`, at the thresholds
        of `settings` (default: the Detector's)."""
        settings = settings or self.settings
        predictor = self.predictor
        found = predictor.detections(outputs, self.backend, conf_threshold=settings.conf_threshold,
                                     iou_threshold=settings.iou_threshold, max_det=settings.max_det,
                                     classes=settings.classes, agnostic=settings.agnostic,
                                     multi_label=settings.multi_label)
        results = []
        for rows, image in zip(found, images):
            rows = rows.float().cpu()
            rows = torch.cat((boxes_to_original(rows[:, :4], image.info), rows[:, 4:]), dim=1)
            results.append(Detections(rows, self.names, image.pixels.shape[:2]))
        return results

    def __call__(self, images: ImageInput | Sequence[ImageInput]) -> list[Detections]:
        """Detections for each image: (h, w, 3) uint8 BGR arrays or image paths, one or a list."""
        single = isinstance(images, (np.ndarray, str, Path))
        arrays = [_as_array(image) for image in ([images] if single else images)]
        if self.sliced is not None:
            return [self._sliced(array) for array in arrays]
        shape = self.input_shape([array.shape[:2] for array in arrays])
        batch = [self.prepare(array, shape) for array in arrays]
        return self.detections(self.predict_batch(batch), batch)

    def track(self, image: ImageInput, stream: Hashable = 0, tracker: str | Path | TrackerSettings = "bytetrack",
              frame_rate: float = 30.0, timestamp: float | None = None) -> Tracks:
        """One frame of `stream` (any key: a camera's name, a file) tracked: its detections (sliced too) fed to that
        stream's tracker, made at its first frame (`tracker`: a kind, a yaml or settings; inference/tracks/). Frames of
        a stream come in order; `timestamp` (seconds) tells the tracker how much time passed since the last one
        (None: one frame at `frame_rate`). reset_tracks(stream) starts it afresh."""
        array = _as_array(image)
        state = self.tracking.get(stream, as_tracker_settings(tracker), frame_rate)
        return state.update(self(array)[0].rows.numpy(), array, timestamp)

    def reset_tracks(self, stream: Hashable | None = None) -> None:
        """Forget one stream's tracks (its next frame starts ids from 1), or every stream's (None)."""
        self.tracking.reset(stream)

    def _sliced(self, array: np.ndarray) -> Detections:
        """One image's detections by sliced inference (TooManyWindows, in one line, past --max-windows)."""
        settings = self.settings
        rows = self.sliced.detect(cv2.cvtColor(array, cv2.COLOR_BGR2RGB), conf_threshold=settings.conf_threshold,
                                  iou_threshold=settings.iou_threshold, max_det=settings.max_det,
                                  classes=settings.classes, agnostic=settings.agnostic,
                                  multi_label=settings.multi_label)
        size = self.sliced.settings.size
        return Detections(rows, self.names, (min(size, array.shape[0]), min(size, array.shape[1])))


def _as_array(image: ImageInput) -> np.ndarray:
    """A (h, w, 3) uint8 BGR array from an array or a path; an unreadable path is a UserError naming it."""
    if isinstance(image, np.ndarray):
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise UserError(f"an image must be (h, w, 3) uint8 BGR, got {image.shape} {image.dtype}")
        return image
    try:
        return load_image(Path(image))
    except Exception as error:  # noqa: BLE001 (a decoder may raise anything; say which file)
        raise UserError(read_failure(image, error)) from None
