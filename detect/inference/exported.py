"""What every exported model shares at run time: its metadata, a static batch cut and padded, NMS in the graph.

Runtimes (onnxruntime, ais_bench for .om, OpenVINO) differ only in how they load a file and run one array; the
subclasses of ExportedModel supply that, and everything a caller sees (names, stride, fixed shape, outputs) is here.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from detect.config import IMAGE_SIZE
from detect.errors import UserError, short_repr

LOGGER = logging.getLogger(__name__)


def decoded_value(text: str) -> Any:
    """A metadata value stored as text: JSON (ours), else a Python literal (yolov5's names), read safely; else text."""
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError):
            continue
    return text


def existing_file(path: str | Path, kind: str) -> Path:
    """`path` as a Path; a UserError naming `kind` ("ONNX", "OM", ...) when no file is there."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{kind} file not found: {path}")
    return path


@dataclasses.dataclass
class GraphNms:
    """The NMS an export carries in its graph (`detect.export --nms`): its thresholds are fixed at export."""

    conf_threshold: float
    iou_threshold: float
    max_det: int
    agnostic: bool
    warned: bool = dataclasses.field(default=False, init=False, repr=False, compare=False)

    def detections(self, output: torch.Tensor, conf_threshold: float, iou_threshold: float, max_det: int, *,
                   classes: Sequence[int] | None = None, agnostic: bool = False) -> list[torch.Tensor]:
        """Per-image (n, 6) [x1, y1, x2, y2, score, class] rows of the graph's (B, max_det, 6) output (padding rows
        score -1), kept above `conf_threshold`, of `classes` and at most `max_det`: what ops.nms would return."""
        if not self.warned:
            self.warned = self._warn_if_different(conf_threshold, iou_threshold, max_det, agnostic)
        output = output.float()
        wanted = None if classes is None else torch.tensor(list(classes), dtype=output.dtype, device=output.device)
        results = []
        for rows in output:
            keep = rows[:, 4] > conf_threshold
            if wanted is not None:
                keep &= (rows[:, 5:6] == wanted).any(dim=1)
            results.append(rows[keep][:max_det])
        return results

    def _warn_if_different(self, conf_threshold: float, iou_threshold: float, max_det: int, agnostic: bool) -> bool:
        """A warning when the thresholds asked for cannot apply (the graph already dropped what they would keep);
        whether it was given."""
        differences = []
        if conf_threshold < self.conf_threshold:
            differences.append(f"--conf-thres {conf_threshold} (the graph keeps scores above {self.conf_threshold})")
        if iou_threshold != self.iou_threshold:
            differences.append(f"--iou-thres {iou_threshold} (the graph's is {self.iou_threshold})")
        if max_det > self.max_det:
            differences.append(f"--max-det {max_det} (the graph keeps {self.max_det})")
        if agnostic != self.agnostic:
            differences.append(f"--agnostic-nms {agnostic} (the graph's is {self.agnostic})")
        if differences:
            LOGGER.warning("this export has NMS in its graph, fixed at export: %s; export again with those flags "
                           "to change it", "; ".join(differences))
        return bool(differences)


def _input_size(value: Any, path: Path) -> tuple[int, int] | None:
    """An export's recorded input size ([h, w], as detect.export writes it); None when it records none (yolov5's)."""
    if value is None:
        return None
    if (isinstance(value, list) and len(value) == 2
            and all(type(side) is int and IMAGE_SIZE.accept(side) for side in value)):
        return value[0], value[1]
    raise UserError(f"{path}: its 'imgsz' metadata {short_repr(value)} is not [height, width] in pixels")


@dataclasses.dataclass(frozen=True)
class ExportInfo:
    """What an export's metadata says: class names, stride, the NMS in its graph if any, and the (h, w) it was
    exported at (what val, predict and serve take unless given; None: not recorded)."""

    names: tuple[str, ...]
    stride: int
    nms: GraphNms | None = None
    imgsz: tuple[int, int] | None = None

    @classmethod
    def from_values(cls, metadata: Mapping[str, Any], path: Path) -> ExportInfo:
        """From decoded values (the .om's JSON sidecar, or text values decoded by from_text)."""
        names, stride, nms = metadata.get("names"), metadata.get("stride"), metadata.get("nms")
        if isinstance(names, dict):  # yolov5's {0: 'person', ...}
            names = [names[key] for key in sorted(names)]
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise UserError(f"{path}: no 'names' metadata that is a list of class names "
                            f"(export it with python -m detect.export)")
        if isinstance(stride, str) and stride.isdigit():
            stride = int(stride)
        if not isinstance(stride, int) or stride <= 0:
            raise UserError(f"{path}: no 'stride' metadata (export it with python -m detect.export)")
        if nms is not None:
            try:
                nms = GraphNms(**nms)
            except TypeError:
                raise UserError(f"{path}: its 'nms' metadata is not {sorted(GraphNms.__annotations__)}") from None
        return cls(tuple(names), stride, nms, _input_size(metadata.get("imgsz"), path))

    @classmethod
    def from_text(cls, metadata: Mapping[str, str], path: Path) -> ExportInfo:
        """From text values (ONNX metadata_props, OpenVINO rt_info): each JSON, or yolov5's Python literals."""
        return cls.from_values({key: decoded_value(value) for key, value in metadata.items()}, path)


class ExportedModel:
    """An exported model behind inference/model.py's contract: (B, 3, H, W) float in [0, 1] -> (B, N, 5+nc)
    float32 decoded predictions, or with NMS in the graph (B, max_det, 6) detections, padding rows -1.

    A static export takes only its own batch size and image shape: a batch is cut into its batch size and the last
    part padded with blank images; the caller letterboxes to `fixed_shape`. A subclass loads the file, then calls
    `_describe`, and runs one array in `_run`.
    """

    format: str  # each runtime's own name of its format (inference/model.py's FORMATS)
    path: Path
    info: ExportInfo
    batch: int | None  # a static export's batch size
    fixed_shape: tuple[int, int] | None  # a static export's (h, w)
    input_dtype: type

    @property
    def names(self) -> tuple[str, ...]:
        return self.info.names

    @property
    def stride(self) -> int:
        return self.info.stride

    @property
    def nms(self) -> GraphNms | None:
        return self.info.nms

    @property
    def imgsz(self) -> tuple[int, int] | None:
        return self.info.imgsz

    def _describe(self, info: ExportInfo, input_shape: Sequence[Any], input_dtype: type) -> None:
        """Record the metadata and the input (B, 3, H, W), where a dimension that is not an int > 0 is dynamic."""
        def fixed(side: Any) -> int | None:
            return side if isinstance(side, int) and side > 0 else None

        batch, _, height, width = (fixed(side) for side in input_shape)
        self.info, self.batch, self.input_dtype = info, batch, input_dtype
        self.fixed_shape = (height, width) if height and width else None

    def _run(self, array: np.ndarray) -> np.ndarray:
        """The first output for one input array of the export's own batch size (any size when dynamic)."""
        raise NotImplementedError

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) float in [0, 1] -> float32 outputs on the images' device (see the class docstring)."""
        if self.fixed_shape is not None and tuple(images.shape[2:]) != self.fixed_shape:
            raise UserError(f"{self.path} takes {self.fixed_shape[0]}x{self.fixed_shape[1]} images only, "
                            f"got {images.shape[2]}x{images.shape[3]}")
        array = np.ascontiguousarray(images.detach().cpu().numpy(), dtype=self.input_dtype)
        step = self.batch or len(array)
        outputs = []
        for start in range(0, len(array), step):
            part = array[start:start + step]
            if len(part) < step:  # a static batch: pad the last part with blank images and drop their rows
                part = np.concatenate([part, np.zeros((step - len(part), *part.shape[1:]), part.dtype)])
            outputs.append(self._run(part)[:len(array) - start])
        return torch.from_numpy(np.concatenate(outputs).astype(np.float32, copy=False)).to(images.device)
