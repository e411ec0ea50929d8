"""`python -m detect.export`: the metadata both exports carry, bad options, an exported yolov5n scored on coco128,
and a model yaml exported without weights (the exporters themselves: tests/exporters/)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from detect import export, val
from detect.exporters.torchscript import TORCHSCRIPT_METADATA
from tests.exporters.helpers import IMGSZ, NAMES
from tests.shared_data import YOLOV5N, needs_shared

# torch 2.14 marks torch.jit.load deprecated; loading the TorchScript file is what these tests check.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")


def test_metadata_travels_in_both_exports(static_exports):
    expected = {"producer": "detect", "names": NAMES, "stride": 32, "imgsz": list(IMGSZ), "batch": 1,
                "dynamic": False, "half": False}
    props = {prop.key: json.loads(prop.value) for prop in onnx.load(str(static_exports["onnx"])).metadata_props}
    assert props == expected
    files = {TORCHSCRIPT_METADATA: ""}
    torch.jit.load(str(static_exports["torchscript"]), _extra_files=files)
    assert json.loads(files[TORCHSCRIPT_METADATA]) == expected


@pytest.mark.parametrize("options, message", [
    (["--include", "om"], "no --soc-version, and no NPU here to read the chip from"),
    (["--include", "om", "--soc-version", "Ascend310P3", "--dynamic"], "needs static shapes"),
    (["--imgsz", "1", "2", "3"], "one side or height width"),
    (["--imgsz", "100"], "multiples of the model's stride 32"),
    (["--opset", "0"], "must be a positive integer"),
    (["--include", "tflite"], "invalid choice"),
])
def test_bad_options_are_one_line_and_exit_2(weights, tmp_path, capsys, options, message):
    try:
        code = export.main(["--weights", str(weights), "--output-dir", str(tmp_path), *options])
    except SystemExit as stopped:  # argparse's own errors stop in parse_args, as in every CLI
        code = stopped.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.slow
@needs_shared
def test_val_of_the_exported_yolov5n_onnx_gives_the_pt_map(tmp_path, coco128_workdir):
    # A --dynamic export takes val's rectangular batches as the .pt does; a static one is scored on square
    # letterboxed inputs (0.359 at 640), as yolov5 scores its exports.
    onnx_path = export.export(export.parse_args(["--weights", str(YOLOV5N), "--include", "onnx", "--dynamic",
                                              "--output-dir", str(tmp_path)]))["onnx"]
    results = {}
    for weights in (YOLOV5N, onnx_path):
        results[weights.suffix] = val.validate(val.parse_args(
            ["--weights", str(weights), "--data", "coco128.yaml", "--img", "320", "--batch-size", "16", "--device",
             "cpu", "--project", str(tmp_path / weights.suffix[1:]), "--no-progress"])).metrics
    assert results[".pt"].map50_95 == pytest.approx(0.289, abs=0.002)  # at 320 (0.370 at 640)
    assert results[".onnx"].map50_95 == pytest.approx(results[".pt"].map50_95, abs=0.001)
    assert results[".onnx"].map50 == pytest.approx(results[".pt"].map50, abs=0.001)


def test_a_model_yaml_exports_without_weights(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --cfg writes into the working folder
    written = export.main(["--cfg", "yolov5n.yaml", "--nc", "3", "--img", "64", "--include", "onnx"])
    assert written == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "yolov5n.onnx"), providers=["CPUExecutionProvider"])
    outputs = session.run(None, {session.get_inputs()[0].name: np.zeros((1, 3, 64, 64), np.float32)})
    assert outputs[0].shape == (1, 3 * (8 * 8 + 4 * 4 + 2 * 2), 5 + 3)
