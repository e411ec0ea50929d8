"""Sliced inference: a model run on overlapping windows of a full-resolution image (ops/windows.py), a batch of
windows a call, and optionally on the whole image fitted into one window; each window's detections mapped back to the
image and merged across the windows."""

from __future__ import annotations

import dataclasses
import math

import cv2
import numpy as np
import torch

from detect.backend import Backend
from detect.config import MAX_IMGSZ, POSITIVE, Bound, Settings, option
from detect.data.images.letterbox import PAD_VALUE, fitted_size
from detect.data.tiles.windows import DEFAULT_MAX_WINDOWS, MAX_WINDOWS_HELP, OVERLAP
from detect.errors import UserError
from detect.inference.predictor import Predictor
from detect.inference.slicing.merge import WHOLE, merge_seams
from detect.ops.windows import window_count, window_grid

MERGES = ("nms", "seam")  # the first is the default: measured in docs/benchmarks.md ("Tiles and slices")
SLICE_HELP = ("run the model on overlapping windows of this many pixels of the full-resolution image, boxes merged "
              "across windows (small objects in large images); default: the image fitted into --imgsz")
SLICE_OVERLAP_HELP = "windows' overlap, a share of --slice"
SLICE_WHOLE_HELP = "with --slice: the whole image fitted into one window too (objects larger than a window)"
SLICE_MERGE_HELP = ("with --slice: how boxes meet across windows: nms (NMS alone) or seam (NMS, then a box cut by a "
                    "window's edge merged into the box of another window that holds it)")
SLICE = Bound(f"an integer in [32, {MAX_IMGSZ}]", lambda value: 32 <= value <= MAX_IMGSZ)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlicingFlags(Settings):
    """The sliced-inference flags that val, predict and serve share (SliceSettings.asked reads them); keyword-only,
    so that a CLI's settings class that inherits them may still open with a required field."""

    slice: int | None = option(None, SLICE_HELP, bound=SLICE)
    slice_overlap: float = option(0.2, SLICE_OVERLAP_HELP, bound=OVERLAP)
    slice_whole: bool = option(False, SLICE_WHOLE_HELP)
    slice_merge: str = option(MERGES[0], SLICE_MERGE_HELP, choices=MERGES)
    max_windows: int = option(DEFAULT_MAX_WINDOWS, MAX_WINDOWS_HELP, bound=POSITIVE)


class TooManyWindows(UserError):
    """An image that would need more windows than the bound (--max-windows)."""


@dataclasses.dataclass(frozen=True)
class SliceSettings:
    """Windows of `size` pixels overlapping by `overlap` of it, `batch_size` windows a model call; `whole`: the whole
    image fitted into one window too (objects larger than a window); `merge`: how detections meet across windows
    ("nms": class-wise NMS over all of them; "seam": the same, then a box cut by a window's inner edge merged into a
    box of another window that holds most of it); an image needing more than `max_windows` is refused."""

    size: int
    overlap: float = 0.2
    whole: bool = False
    merge: str = MERGES[0]
    batch_size: int = 16
    max_windows: int = DEFAULT_MAX_WINDOWS

    @classmethod
    def asked(cls, flags: SlicingFlags, batch_size: int = 16) -> SliceSettings | None:
        """The slicing a CLI's settings ask for (their slice, slice_overlap, slice_whole, slice_merge and
        max_windows), or None without --slice."""
        if flags.slice is None:
            return None
        return cls(flags.slice, flags.slice_overlap, flags.slice_whole, flags.slice_merge, batch_size,
                   flags.max_windows)


@dataclasses.dataclass(frozen=True)
class _Windows:
    """An image's windows: boxes (n, 4) int64 xyxy in its pixels, all shaped (h, w) for the network, each placed at
    (left, top) inside that shape (padded around as letterbox pads)."""

    boxes: np.ndarray
    shape: tuple[int, int]
    left: int
    top: int


class SlicedPredictor:
    """A predictor run on windows of an image instead of the image fitted into one input: detect(image, nms
    settings) gives the image's detections in its own pixels."""

    def __init__(self, predictor: Predictor, backend: Backend, settings: SliceSettings, stride: int) -> None:
        if settings.merge not in MERGES:
            raise UserError(f"slice merge {settings.merge!r}: choose one of {', '.join(MERGES)}")
        size = math.ceil(settings.size / stride) * stride  # a window is a network input: sides multiples of stride
        self.predictor, self.backend, self.stride = predictor, backend, stride
        self.settings = dataclasses.replace(settings, size=size)

    def window_count(self, height: int, width: int) -> int:
        """How many windows an image of (height, width) is run in: its grid, and the whole image too when asked."""
        grid = window_count(height, width, self.settings.size, self.settings.overlap)
        return grid + (self.settings.whole and grid > 1)

    def check(self, height: int, width: int) -> None:
        """TooManyWindows, in one line, for an image that would need more windows than the bound."""
        size, overlap, limit = self.settings.size, self.settings.overlap, self.settings.max_windows
        needed = window_count(height, width, size, overlap)
        if needed > limit:
            raise TooManyWindows(f"{width}x{height} needs {needed} windows of {size} px at overlap {overlap:g}, more "
                                 f"than --max-windows {limit}")

    def _windows(self, height: int, width: int) -> _Windows:
        boxes = window_grid(height, width, self.settings.size, self.settings.overlap)
        inner_h, inner_w = int(boxes[0, 3] - boxes[0, 1]), int(boxes[0, 2] - boxes[0, 0])
        shape = (math.ceil(inner_h / self.stride) * self.stride, math.ceil(inner_w / self.stride) * self.stride)
        # placed as letterbox places an image (round(pad - 0.1)), so one window over the image is plain predict's input
        return _Windows(boxes, shape, round((shape[1] - inner_w) / 2 - 0.1), round((shape[0] - inner_h) / 2 - 0.1))

    def _run(self, inputs: np.ndarray, nms: dict) -> list[torch.Tensor]:
        """Per-input (n, 6) detections in input pixels of (B, h, w, 3) uint8 RGB inputs."""
        tensor = self.backend.to_device(torch.from_numpy(inputs).permute(0, 3, 1, 2)).float() / 255
        return [found.float().cpu() for found in self.predictor.detections(self.predictor(tensor), self.backend, **nms)]

    @torch.no_grad()
    def detect(self, image: np.ndarray, **nms) -> torch.Tensor:
        """(n, 6) [x1, y1, x2, y2, score, class] detections of a (H, W, 3) uint8 RGB image in its pixels, best first;
        `nms`: Predictor.detections' keyword arguments (conf_threshold, iou_threshold, max_det, ...). max_det caps each
        window's detections, and the image's at max_det times its windows: the cap of a whole image would cut one that
        holds many windows' worth of objects (docs/usage.md, "Small objects in large images: tiles and slices")."""
        height, width = image.shape[:2]
        self.check(height, width)
        windows = self._windows(height, width)
        found, sources = [], []
        for start in range(0, len(windows.boxes), self.settings.batch_size):
            chosen = windows.boxes[start:start + self.settings.batch_size]
            inputs = np.full((len(chosen), *windows.shape, 3), PAD_VALUE, np.uint8)
            for slot, (x1, y1, x2, y2) in zip(inputs, chosen.tolist()):
                slot[windows.top:windows.top + y2 - y1, windows.left:windows.left + x2 - x1] = image[y1:y2, x1:x2]
            for offset, rows in enumerate(self._run(inputs, nms)):
                x1, y1 = chosen[offset, :2].tolist()
                shift = torch.tensor([x1 - windows.left, y1 - windows.top] * 2, dtype=rows.dtype)
                found.append(torch.cat((rows[:, :4] + shift, rows[:, 4:]), dim=1))
                sources.append(torch.full((len(rows),), start + offset))
        if self.settings.whole and len(windows.boxes) > 1:
            found.append(self._whole(image, nms))
            sources.append(torch.full((len(found[-1]),), WHOLE))
        rows, ids = torch.cat(found), torch.cat(sources)
        rows[:, :4] = torch.stack([rows[:, 0].clamp(0, width), rows[:, 1].clamp(0, height),
                                   rows[:, 2].clamp(0, width), rows[:, 3].clamp(0, height)], dim=1)
        order = torch.sort(rows[:, 4], descending=True, stable=True).indices
        rows, ids = rows[order], ids[order]
        if self.settings.merge == "seam":
            rows, ids = merge_seams(rows, ids, torch.from_numpy(windows.boxes), height, width)
        cap = nms.get("max_det", 300) * self.window_count(height, width)
        return self._suppress(rows, nms.get("iou_threshold", 0.45), nms.get("agnostic", False))[:cap]

    def _whole(self, image: np.ndarray, nms: dict) -> torch.Tensor:
        """Detections of the whole image fitted into one window (letterboxed), in the image's pixels."""
        height, width = image.shape[:2]
        ratio = self.settings.size / max(height, width)
        fitted_h, fitted_w = fitted_size(height, width, ratio)
        shape = (math.ceil(fitted_h / self.stride) * self.stride, math.ceil(fitted_w / self.stride) * self.stride)
        inputs = np.full((1, *shape, 3), PAD_VALUE, np.uint8)
        top, left = round((shape[0] - fitted_h) / 2 - 0.1), round((shape[1] - fitted_w) / 2 - 0.1)
        inputs[0, top:top + fitted_h, left:left + fitted_w] = cv2.resize(image, (fitted_w, fitted_h),
                                                                         interpolation=cv2.INTER_AREA)
        rows = self._run(inputs, nms)[0]
        pad = torch.tensor([left, top] * 2, dtype=rows.dtype)
        return torch.cat(((rows[:, :4] - pad) / ratio, rows[:, 4:]), dim=1)

    def _suppress(self, rows: torch.Tensor, iou_threshold: float, agnostic: bool) -> torch.Tensor:
        """Class-wise NMS over every window's detections (boxes offset by class, as ops/nms.py), best first."""
        if not len(rows):
            return rows
        apart = 0 if agnostic else float(rows[:, :4].max()) + 1
        return rows[self.backend.nms(rows[:, :4] + rows[:, 5:6] * apart, rows[:, 4], iou_threshold).long().cpu()]
