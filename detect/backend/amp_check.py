"""yolov5's check_amp without a download: before training with AMP on an accelerator, the model's predictions on a
fixed image with and without autocast must agree, or an fp16 problem would only show as a flat mAP days later."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import torch

from detect.backend.base import Backend

CONFIDENT = 0.25  # predictions compared box by box: as confident as predict's default threshold
BOX_TOLERANCE = 0.02  # their boxes' largest difference, as a fraction of the image side
SCORE_TOLERANCE = 0.05  # every prediction's confidence (objectness x best class score)


@dataclasses.dataclass(frozen=True)
class AmpCheck:
    """How far autocast's predictions are from fp32's, and whether that is within the tolerances."""

    box_error: float  # fraction of the image side, over the confident predictions (0 when there are none)
    score_error: float
    nonfinite: int  # predictions finite in fp32 but not under autocast

    @property
    def agrees(self) -> bool:
        return self.nonfinite == 0 and self.box_error <= BOX_TOLERANCE and self.score_error <= SCORE_TOLERANCE

    def __str__(self) -> str:
        return (f"boxes {100 * self.box_error:.1f}% of the side (at most {100 * BOX_TOLERANCE:g}%), confidences "
                f"{self.score_error:.3f} (at most {SCORE_TOLERANCE:g}), {self.nonfinite} not finite")


@torch.no_grad()
def check_amp(predict: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor, backend: Backend) -> AmpCheck:
    """Compare `predict` (decoded (B, N, 5+nc) rows [cx, cy, w, h, obj, classes...]) on `images` ((B, 3, S, S) in
    [0, 1], on the backend's device) in fp32 and under the backend's autocast."""
    reference = predict(images).float()
    with backend.autocast():
        mixed = predict(images).float()
    finite = torch.isfinite(reference).all(-1)
    nonfinite = int((finite & ~torch.isfinite(mixed).all(-1)).sum())
    confidence = [(rows[..., 4:5] * rows[..., 5:]).amax(-1) for rows in (reference, mixed)]
    both = finite & torch.isfinite(mixed).all(-1)
    score_error = float((confidence[0] - confidence[1]).abs()[both].max()) if both.any() else 0.0
    sure = both & (confidence[0] > CONFIDENT)
    box_error = float((reference[..., :4] - mixed[..., :4]).abs()[sure].max()) / images.shape[-1] if sure.any() else 0.0
    return AmpCheck(box_error, score_error, nonfinite)


def image_batch(path: Path, size: int, device: torch.device) -> torch.Tensor:
    """The image at `path` as a (1, 3, size, size) RGB batch in [0, 1] on `device` (stretched: the check needs no
    letterbox)."""
    image = cv2.resize(cv2.imread(str(path), cv2.IMREAD_COLOR), (size, size), interpolation=cv2.INTER_AREA)
    rgb = np.ascontiguousarray(image[:, :, ::-1])
    return torch.from_numpy(rgb).permute(2, 0, 1)[None].float().div(255).to(device)
