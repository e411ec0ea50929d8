"""An OpenVINO IR behind the inference contract: found from its .xml or its folder, a static batch cut and padded,
its metadata read back, and what cannot work said in one line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from detect import backend as backends
from detect.backend.openvino_runtime import import_openvino
from detect.errors import UserError
from detect.exporters.onnx_export import export_onnx
from detect.exporters.openvino_export import export_openvino
from detect.exporters.torchscript import ExportSettings, export_metadata, traced_module
from detect.inference.model import load_inference_model
from detect.inference.runtimes.openvino_model import OpenVinoInference
from detect.models.weights import load_model
from tests.exporters.helpers import NAMES, assert_static_batches_cut_and_padded, tiny_weights

# find_spec, not importorskip: a bare `import openvino` sends its telemetry (detect/backend/openvino_runtime.py).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("openvino") is None,
                                reason='OpenVINO is optional (pip install "detect-trainer[openvino]")')

CPU = backends.select("cpu")


@pytest.fixture(scope="module")
def static_ir(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    """A static export at batch 2 and 64x96, its ONNX beside it, and the model it came from."""
    folder = tmp_path_factory.mktemp("openvino")
    model = load_model(tiny_weights(folder))
    settings = ExportSettings(imgsz=(64, 96), batch_size=2)
    module, example = traced_module(model, settings, torch.device("cpu"))
    onnx_path = export_onnx(module, example, export_metadata(model, settings), settings, folder / "tiny.onnx")
    return export_openvino(onnx_path, settings), load_model(folder / "tiny.pt")


def test_a_static_ir_cuts_and_pads_any_batch_to_its_own(static_ir):
    xml, model = static_ir
    inference = load_inference_model(xml, CPU)
    assert isinstance(inference, OpenVinoInference)
    assert inference.names == tuple(NAMES) and inference.stride == 32 and inference.nms is None
    assert_static_batches_cut_and_padded(inference, model)


def test_the_exports_folder_names_its_ir_and_what_cannot_work_is_one_line(static_ir, tmp_path):
    xml, _ = static_ir
    assert load_inference_model(xml.parent, CPU).path == xml
    with pytest.raises(UserError, match="--half does not apply"):
        load_inference_model(xml, CPU, half=True)
    with pytest.raises(UserError, match="OpenVINO file not found"):
        load_inference_model(tmp_path / "absent.xml", CPU)
    empty = tmp_path / "empty_openvino_model"
    empty.mkdir()
    with pytest.raises(UserError, match="expected one OpenVINO .xml in it, found 0"):
        load_inference_model(empty, CPU)
    (tmp_path / "broken.xml").write_text("<net")
    with pytest.raises(UserError, match="OpenVINO cannot read it"):
        load_inference_model(tmp_path / "broken.xml", CPU)


def test_an_ir_without_our_metadata_is_named(static_ir, tmp_path):
    xml, _ = static_ir
    openvino = import_openvino("the test")
    bare = tmp_path / "bare.xml"
    openvino.save_model(openvino.convert_model(str(xml.parent.parent / "tiny.onnx")), str(bare),
                        compress_to_fp16=False)
    with pytest.raises(UserError, match="no 'names' metadata"):
        OpenVinoInference(bare, CPU)
