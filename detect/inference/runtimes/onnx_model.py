"""An exported ONNX run by onnxruntime, on the execution provider of the backend's device (CPU, CUDA, CANN)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from detect.backend import Backend
from detect.errors import UserError
from detect.inference.exported import ExportedModel, ExportInfo, existing_file

LOGGER = logging.getLogger(__name__)

# onnxruntime's names for the input types an export can have.
INPUT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def _onnxruntime(path: Path):
    """The onnxruntime package, or one line naming what to install."""
    try:
        import onnxruntime
    except ImportError as error:
        raise UserError(f'running {path} needs onnxruntime: pip install "detect-trainer[export]" ({error})') from None
    return onnxruntime


def _session(path: Path, backend: Backend):
    """A session on the execution provider of `backend`'s device; one line naming what to install when this
    onnxruntime build lacks that provider (onnxruntime-gpu for CUDA, onnxruntime-cann for Ascend)."""
    onnxruntime = _onnxruntime(path)
    provider, options, package = backend.onnx_provider()
    if provider not in onnxruntime.get_available_providers():
        raise UserError(f"running {path} on {backend.device} needs onnxruntime's {provider}, which this onnxruntime "
                        f"lacks: pip install {package} (in place of onnxruntime), or run it with --device cpu")
    session_options = onnxruntime.SessionOptions()
    session_options.log_severity_level = 3  # errors only: its warnings about unused initialisers are noise here
    try:
        return onnxruntime.InferenceSession(str(path), session_options, providers=[(provider, options)])
    except Exception as error:  # noqa: BLE001 (onnxruntime raises its own exception types for a bad file)
        raise UserError(f"{path}: onnxruntime cannot load it ({str(error).strip().splitlines()[0]})") from None


class OnnxInference(ExportedModel):
    """An exported ONNX in onnxruntime; names, stride and NMS-in-graph from its metadata_props."""

    format = "onnx"  # its name in inference/model.py's FORMATS

    def __init__(self, path: str | Path, backend: Backend) -> None:
        self.path = existing_file(path, "ONNX")
        self.session = _session(self.path, backend)
        LOGGER.info("%s runs in onnxruntime on %s", self.path, self.session.get_providers()[0])
        graph_input = self.session.get_inputs()[0]
        if graph_input.type not in INPUT_TYPES:
            raise UserError(f"{self.path}: input type {graph_input.type} is not one of {', '.join(INPUT_TYPES)}")
        info = ExportInfo.from_text(self.session.get_modelmeta().custom_metadata_map, self.path)
        self._describe(info, graph_input.shape, INPUT_TYPES[graph_input.type])
        self.input_name, self.output_name = graph_input.name, self.session.get_outputs()[0].name

    def _run(self, array: np.ndarray) -> np.ndarray:
        return self.session.run([self.output_name], {self.input_name: array})[0]
