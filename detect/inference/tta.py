"""Test-time augmentation (yolov5's --augment): the model run on the images at three scales, the middle one flipped
left-right, and the decoded predictions of all three mapped back to the input's pixels and joined before NMS."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from detect.errors import UserError
from detect.inference.model import InferenceModel
from detect.inference.predictor import Predictor
from detect.inference.runtimes.ensemble_model import EnsembleInference, concatenated
from detect.inference.runtimes.torch_model import TorchInference

Predict = Callable[[torch.Tensor], torch.Tensor]

# yolov5 models/yolo.py _forward_augment: scales 1, 0.83, 0.67; only the 0.83 pass is flipped (left-right).
SCALES = (1.0, 0.83, 0.67)
FLIPS = (False, True, False)
SCALE_PAD = 0.447  # yolov5 scale_img's padding of a float image, the grey of the letterbox (114 / 255, rounded)


def scale_images(images: torch.Tensor, ratio: float, stride: int) -> torch.Tensor:
    """(B, 3, H, W) -> (B, 3, H', W'): resized (bilinear) to int(side * ratio), then padded right and bottom with grey
    up to ceil(side * ratio / stride) * stride (yolov5's scale_img). Ratio 1 returns the images as they are."""
    if ratio == 1.0:
        return images
    height, width = images.shape[2:]
    size = (int(height * ratio), int(width * ratio))
    resized = F.interpolate(images, size=size, mode="bilinear", align_corners=False)
    padded_h, padded_w = (math.ceil(side * ratio / stride) * stride for side in (height, width))
    return F.pad(resized, [0, padded_w - size[1], 0, padded_h - size[0]], value=SCALE_PAD)


def restore_boxes(decoded: torch.Tensor, size: tuple[int, int], scaled: tuple[int, int], flipped: bool) -> torch.Tensor:
    """Decoded rows (B, N, 5+nc) of an image scaled from `size` (h, w) to `scaled` (h, w, before padding) and maybe
    flipped left-right -> the same rows in the original image's pixels (a new tensor; the input is untouched).

    yolov5 divides by the nominal ratio (0.83); the exact per-axis ratio of the resize is used here, so that a box
    comes back exactly where it was (int() rounds 640 * 0.83 to 531, 0.04% off).
    """
    ratio_y, ratio_x = scaled[0] / size[0], scaled[1] / size[1]
    boxes = decoded[..., :4] / decoded.new_tensor([ratio_x, ratio_y, ratio_x, ratio_y])
    if flipped:
        boxes = torch.cat((size[1] - boxes[..., :1], boxes[..., 1:]), dim=-1)
    return torch.cat((boxes, decoded[..., 4:]), dim=-1)


def level_rows(shape: tuple[int, int], strides: Sequence[int], total: int) -> list[int]:
    """Rows each level contributes to a (B, total, 5+nc) output for an input of `shape` (h, w): anchors x cells."""
    cells = [(shape[0] // stride) * (shape[1] // stride) for stride in strides]
    anchors, remainder = divmod(total, sum(cells))
    if remainder or not anchors:
        raise ValueError(f"{total} rows do not split into levels of strides {list(strides)} at {shape[0]}x{shape[1]}")
    return [anchors * count for count in cells]


def drop_level(decoded: torch.Tensor, rows: list[int], level: int) -> torch.Tensor:
    """The rows of every level but `level` (levels are concatenated in order, DetectionModel.predict)."""
    start = sum(rows[:level])
    return torch.cat((decoded[:, :start], decoded[:, start + rows[level]:]), dim=1)


def augmented(predict: Predict, strides: Sequence[int]) -> Predict:
    """`predict` with yolov5's test-time augmentation; `strides` are the model's, one per output level, in order.

    As yolov5 does (_clip_augmented), the full-size pass drops its coarsest level (its large boxes are better seen
    at the smaller scales) and the smallest pass drops its finest level (small objects shrunk below it).
    """
    strides = [int(stride) for stride in strides]
    coarsest, finest = strides.index(max(strides)), strides.index(min(strides))

    def predict_augmented(images: torch.Tensor) -> torch.Tensor:
        size = (images.shape[2], images.shape[3])
        outputs = []
        for index, (ratio, flipped) in enumerate(zip(SCALES, FLIPS)):
            scaled = scale_images(images.flip(3) if flipped else images, ratio, max(strides))
            decoded = predict(scaled)
            rows = level_rows((scaled.shape[2], scaled.shape[3]), strides, decoded.shape[1])
            if index == 0:
                decoded = drop_level(decoded, rows, coarsest)
            elif index == len(SCALES) - 1:
                decoded = drop_level(decoded, rows, finest)
            resized = (int(size[0] * ratio), int(size[1] * ratio)) if ratio != 1.0 else size
            outputs.append(restore_boxes(decoded, size, resized, flipped))
        return torch.cat(outputs, dim=1)

    return predict_augmented


def augment_model(model: InferenceModel) -> Predictor:
    """The model's predict with test-time augmentation (decoded rows; an ensemble's members each augmented, as
    yolov5's Ensemble passes augment on); an exported model is refused in one line.

    An export holds no per-level strides (the tails to drop) and a static one takes a single input shape; yolov5
    likewise augments only its PyTorch weights. Augment the .pt, then export it.
    """
    members = model.members if isinstance(model, EnsembleInference) else (model,)
    if not all(isinstance(member, TorchInference) for member in members):
        raise UserError("--augment runs PyTorch weights (.pt) only, not an exported model: validate or predict with "
                        "the .pt it was exported from")
    predicts = [augmented(member, member.model.stride.tolist()) for member in members]
    return Predictor(predicts[0] if len(predicts) == 1 else concatenated(predicts))
