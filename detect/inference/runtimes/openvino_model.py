"""An OpenVINO IR (`detect.export --include openvino`) run by OpenVINO's CPU plugin."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from detect.backend import Backend
from detect.backend.openvino_runtime import FOLDER_SUFFIX, RT_INFO_SECTION, import_openvino, shared_core
from detect.errors import UserError
from detect.inference.exported import ExportedModel, ExportInfo, existing_file

LOGGER = logging.getLogger(__name__)

INPUT_TYPES = {"f32": np.float32, "f16": np.float16}  # OpenVINO's element type names of the inputs an export has


def openvino_file(weights: str | Path) -> Path:
    """The .xml that `weights` names: the file itself, or the one in an export's <stem>_openvino_model folder."""
    path = Path(weights)
    if path.suffix.lower() == ".xml" or not path.is_dir():
        return path
    own = path / f"{path.name.removesuffix(FOLDER_SUFFIX)}.xml"
    found = [own] if own.is_file() else sorted(path.glob("*.xml"))
    if len(found) != 1:
        raise UserError(f"{path}: expected one OpenVINO .xml in it, found {len(found)}: give the .xml itself")
    return found[0]


class OpenVinoInference(ExportedModel):
    """An OpenVINO IR compiled once for the CPU; names, stride and NMS-in-graph from its rt_info."""

    format = "openvino"  # its name in inference/model.py's FORMATS

    def __init__(self, weights: str | Path, backend: Backend) -> None:
        """`weights`: the .xml, or the export's <stem>_openvino_model folder that holds it."""
        self.path = existing_file(openvino_file(weights), "OpenVINO")
        purpose = f"running {self.path}"
        openvino, core = import_openvino(purpose), shared_core(purpose)
        try:
            model = core.read_model(str(self.path))
        except RuntimeError as error:
            raise UserError(f"{self.path}: OpenVINO cannot read it ({str(error).strip().splitlines()[0]})") from None
        metadata = model.get_rt_info()[RT_INFO_SECTION] if model.has_rt_info([RT_INFO_SECTION]) else {}
        info = ExportInfo.from_text({key: value.astype(str) for key, value in metadata.items()}, self.path)
        if backend.device.type != "cpu":
            LOGGER.info("%s runs in OpenVINO on the host CPU, not on %s", self.path, backend.device)
        # f32: the CPU plugin computes in bf16 where the CPU has it (this one has avx512_bf16), which moved the tiny
        # test model's boxes by 0.1 px from the ONNX's and yolov5n's coco128 mAP by 0.0026; in f32 they agree to
        # 6e-5 px and 0.00004 mAP (docs/deploy.md, OpenVINO).
        self.compiled = core.compile_model(model, "CPU",
                                           {openvino.properties.hint.inference_precision: openvino.Type.f32})
        graph_input = self.compiled.input(0)
        element_type = graph_input.get_element_type().get_type_name()
        if element_type not in INPUT_TYPES:
            raise UserError(f"{self.path}: input type {element_type} is not one of {', '.join(INPUT_TYPES)}")
        shape = [side.get_length() if side.is_static else None for side in graph_input.get_partial_shape()]
        self._describe(info, shape, INPUT_TYPES[element_type])
        self.request = self.compiled.create_infer_request()

    def _run(self, array: np.ndarray) -> np.ndarray:
        return self.request.infer({0: array})[0]
