"""Several PyTorch models run as one (yolov5's Ensemble, models/experimental.py): each member's decoded rows joined
along the candidates, so that one NMS chooses among them all."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import torch

from detect.errors import UserError
from detect.inference.runtimes.torch_model import TorchInference

LOGGER = logging.getLogger(__name__)
Predict = Callable[[torch.Tensor], torch.Tensor]
NAMES_SHOWN = 3  # class names quoted when two members' classes differ


def concatenated(predicts: Sequence[Predict]) -> Predict:
    """One predict whose (B, N1 + N2 + ..., 5+nc) output is each predict's decoded rows, in order (yolov5's "nms
    ensemble": torch.cat of the members' outputs on dim 1)."""
    def predict_all(images: torch.Tensor) -> torch.Tensor:
        return torch.cat([predict(images) for predict in predicts], dim=1)

    return predict_all


def _classes(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN]) + (", ..." if len(names) > NAMES_SHOWN else "")
    return f"{len(names)} classes ({shown})"


def describe(path: str, member: TorchInference) -> str:
    """One line of what a member is: its file, depth and width multiples, parameters and classes."""
    model = member.model
    parameters = sum(parameter.numel() for parameter in model.parameters())
    return (f"{path}: depth {model.spec.depth_multiple:g}, width {model.spec.width_multiple:g}, stride "
            f"{member.stride}, {parameters:,} parameters, {len(member.names)} classes")


class EnsembleInference:
    """PyTorch models with the same classes behind one inference contract (inference/model.py): the input is a
    multiple of the largest stride (as yolov5's attempt_load), so that every member takes it."""

    format = "pytorch"  # several checkpoints (inference/model.py's FORMATS)
    fixed_shape = None
    batch = None
    nms = None

    def __init__(self, members: Sequence[TorchInference], paths: Sequence[str]) -> None:
        first, first_path = members[0], paths[0]
        for member, path in zip(members[1:], paths[1:]):
            if member.names != first.names:
                raise UserError(f"an ensemble's models must predict the same classes: {first_path} has "
                                f"{_classes(first.names)}, {path} has {_classes(member.names)}")
        self.members = tuple(members)
        self.names = first.names
        self.stride = max(member.stride for member in members)
        sizes = {member.imgsz for member in members}
        self.imgsz = sizes.pop() if len(sizes) == 1 else None  # the members' training size when they share one
        self._predict = concatenated(self.members)
        LOGGER.info("ensemble of %d models, their raw predictions joined before one NMS:\n  %s", len(members),
                    "\n  ".join(describe(path, member) for path, member in zip(paths, members)))

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) float in [0, 1] on the device -> (B, N, 5+nc) float32: every member's decoded rows."""
        return self._predict(images)
