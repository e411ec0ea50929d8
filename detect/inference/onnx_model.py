"""An exported ONNX run by onnxruntime, behind the same predict contract as a PyTorch model (inference/model.py)."""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path

import numpy as np
import torch

from detect.backend import Backend
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)

# onnxruntime's names for the input types an export can have.
INPUT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def _names(text: str, path: Path) -> tuple[str, ...]:
    """Class names from metadata: our JSON list, or yolov5's `{0: 'person', ...}` (a Python literal, read safely)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = None
    if isinstance(value, dict):
        value = [value[key] for key in sorted(value)]
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise UserError(f"{path}: the 'names' metadata is not a list of class names")
    return tuple(value)


def _session(path: Path):
    """An onnxruntime session on the CPU provider; one line naming what to install when onnxruntime is missing."""
    try:
        import onnxruntime
    except ImportError as error:
        raise UserError(f'running {path} needs onnxruntime: pip install "detect-trainer[export]" ({error})') from None
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: its warnings about unused initialisers are noise here
    try:
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # noqa: BLE001 (onnxruntime raises its own exception types for a bad file)
        raise UserError(f"{path}: onnxruntime cannot load it ({str(error).strip().splitlines()[0]})") from None


class OnnxInference:
    """An exported model in onnxruntime (CPU provider): (B, 3, H, W) -> (B, N, 5+nc) decoded, NMS outside.

    A static export takes only its own batch size and image shape: a batch is cut into its batch size and the last
    part padded with zeros; the caller letterboxes to `fixed_shape`. Names and stride come from the metadata.
    """

    def __init__(self, path: str | Path, backend: Backend) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise UserError(f"ONNX file not found: {self.path}")
        self.session = _session(self.path)
        if backend.device.type != "cpu":
            LOGGER.info("%s runs in onnxruntime on the CPU; its outputs move to %s", self.path, backend.device)
        metadata = self.session.get_modelmeta().custom_metadata_map
        if "names" not in metadata or not metadata.get("stride", "").isdigit():
            raise UserError(f"{self.path}: no 'names' and 'stride' metadata (export it with python -m detect.export)")
        self.names, self.stride = _names(metadata["names"], self.path), int(metadata["stride"])
        graph_input = self.session.get_inputs()[0]
        self.input_name, self.output_name = graph_input.name, self.session.get_outputs()[0].name
        if graph_input.type not in INPUT_TYPES:
            raise UserError(f"{self.path}: input type {graph_input.type} is not one of {', '.join(INPUT_TYPES)}")
        self.input_type = INPUT_TYPES[graph_input.type]
        batch, _, height, width = graph_input.shape
        self.batch = batch if isinstance(batch, int) else None
        self.fixed_shape = (height, width) if isinstance(height, int) and isinstance(width, int) else None

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) float in [0, 1] -> (B, N, 5+nc) float32 on the images' device."""
        if self.fixed_shape is not None and tuple(images.shape[2:]) != self.fixed_shape:
            raise UserError(f"{self.path} takes {self.fixed_shape[0]}x{self.fixed_shape[1]} images only, "
                            f"got {images.shape[2]}x{images.shape[3]}")
        array = np.ascontiguousarray(images.detach().cpu().numpy(), dtype=self.input_type)
        step = self.batch or len(array)
        outputs = []
        for start in range(0, len(array), step):
            part = array[start:start + step]
            if len(part) < step:  # a static batch: pad the last part with blank images and drop their rows
                part = np.concatenate([part, np.zeros((step - len(part), *part.shape[1:]), part.dtype)])
            outputs.append(self.session.run([self.output_name], {self.input_name: part})[0][:len(array) - start])
        return torch.from_numpy(np.concatenate(outputs).astype(np.float32, copy=False)).to(images.device)
