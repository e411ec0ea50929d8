"""A model's predict callable, typed by what it returns, and the detections of its outputs (our NMS or the graph's)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from detect.backend import Backend
from detect.inference.exported import GraphNms
from detect.ops.nms import non_max_suppression


@dataclasses.dataclass(frozen=True)
class Predictor:
    """A predict callable typed by what it returns: decoded rows that our NMS still sorts, or with `graph_nms` the
    rows that the NMS in an export's graph kept (the model already did NMS)."""

    predict: Callable[[torch.Tensor], torch.Tensor]  # (B, 3, H, W) float in [0, 1] on the device -> its outputs
    graph_nms: GraphNms | None = None  # the NMS in an export's graph; None: outputs are (B, N, 5+nc) decoded rows

    @property
    def did_nms(self) -> bool:
        """Whether the model's outputs are detections already (NMS in its graph)."""
        return self.graph_nms is not None

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return self.predict(images)

    def detections(self, output: torch.Tensor, backend: Backend, *, conf_threshold: float, iou_threshold: float,
                   max_det: int, classes: Sequence[int] | None = None, agnostic: bool = False,
                   multi_label: bool = True) -> list[torch.Tensor]:
        """Per-image (n, 6) [x1, y1, x2, y2, score, class] detections in input pixels of this callable's `output`:
        our NMS on decoded rows, or the rows that the graph's NMS kept."""
        if self.graph_nms is not None:
            return self.graph_nms.detections(output, conf_threshold, iou_threshold, max_det, classes=classes,
                                             agnostic=agnostic)
        return non_max_suppression(backend.nms_input(output).float(), conf_threshold, iou_threshold, classes=classes,
                                   agnostic=agnostic, multi_label=multi_label, max_det=max_det,
                                   **backend.nms_arguments())
