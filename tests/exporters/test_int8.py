"""INT8: ONNX Runtime's static quantization of the ONNX export and NNCF's of the OpenVINO IR (calibrated on a tiny
dataset), and AMCT before atc for the .om through a stand-in amct_onnx that checks the documented call signatures."""

from __future__ import annotations

import importlib.util
import inspect
import json
import logging
import shutil
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from detect import export, val
from detect.backend import select
from detect.exporters.int8 import STEM_CONVS, calibration_batches, float_nodes, head_nodes, quantize_onnx
from detect.exporters.torchscript import ExportSettings
from tests.exporters.helpers import IMGSZ, onnx_outputs, run_export
from tests.exporters.test_om import fake_atc
from tests.shared_data import YOLOV5N, needs_shared
from tests.training.helpers import tiny_dataset

CALIB_IMAGES = 4


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("data"), count=6)


@pytest.fixture(scope="module")
def fp32(weights, tmp_path_factory) -> Path:
    return run_export(weights, tmp_path_factory.mktemp("fp32"), "--include", "onnx")["onnx"]  # default opset 13


@pytest.fixture(scope="module")
def quantized(fp32, data) -> Path:
    return quantize_onnx(fp32, str(data), CALIB_IMAGES, ExportSettings(imgsz=IMGSZ))


def _calibration_input(data: Path) -> np.ndarray:
    paths = sorted((data.parent / "images" / "train").iterdir())[:CALIB_IMAGES]
    return np.concatenate(list(calibration_batches(paths, ExportSettings(imgsz=IMGSZ))))


def test_int8_onnx_has_qdq_nodes_with_the_stem_and_the_detect_head_in_float(fp32, quantized):
    assert quantized == fp32.with_name("tiny-int8.onnx")
    model = onnx.load(str(quantized))
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("QuantizeLinear") > 50 and ops.count("DequantizeLinear") > 50
    original = onnx.load(str(fp32))
    head_convs, head = head_nodes(original)
    float_convs, kept = float_nodes(original)
    assert len(head_convs) == 3  # one output convolution per detection level
    all_convs = [node.name for node in original.graph.node if node.op_type == "Conv"]
    feeders = [name for name in float_convs if name not in all_convs[:STEM_CONVS] and name not in head_convs]
    assert float_convs[:STEM_CONVS] == all_convs[:STEM_CONVS] and len(feeders) == 3
    assert set(head) <= set(kept)
    produced_by = {output: node.op_type for node in model.graph.node for output in node.output}
    for node in model.graph.node:
        if node.op_type == "Conv":  # a float Conv reads a float weight; every other one a dequantized int8 weight
            weight_is_dequantized = produced_by.get(node.input[1]) == "DequantizeLinear"
            assert weight_is_dequantized == (node.name not in float_convs), node.name


def test_int8_onnx_keeps_the_metadata_and_says_int8(fp32, quantized):
    def props(path: Path) -> dict:
        return {prop.key: json.loads(prop.value) for prop in onnx.load(str(path)).metadata_props}

    assert props(quantized) == {**props(fp32), "int8": True}


def test_int8_outputs_are_near_the_fp32_ones(fp32, quantized, data):
    images = torch.from_numpy(_calibration_input(data)[:1])
    fp32, int8 = onnx_outputs(fp32, images), onnx_outputs(quantized, images)
    assert int8.shape == fp32.shape and np.isfinite(int8).all()
    # Box centres and sizes in pixels, and scores in [0, 1]: an error of a few percent of the input and of the score
    # range, far below what a broken scale (or quantizing the decode's concatenation) gives.
    assert np.abs(int8[..., :4] - fp32[..., :4]).mean() < 1.0
    assert np.abs(int8[..., 4:] - fp32[..., 4:]).mean() < 0.02
    assert not np.array_equal(int8, fp32)  # it did change: the file really is quantized


def test_calibration_batches_are_what_val_feeds(data):
    batches = list(calibration_batches(sorted((data.parent / "images" / "train").iterdir()),
                                       ExportSettings(imgsz=IMGSZ, batch_size=4)))
    assert len(batches) == 1  # 6 images: one full batch of 4, the rest dropped (a static input needs 4)
    batch = batches[0]
    assert batch.shape == (4, 3, *IMGSZ) and batch.dtype == np.float32 and 0 <= batch.min() and batch.max() <= 1


def test_export_int8_flag_writes_both_and_a_dynamic_int8_takes_any_size(weights, data, tmp_path):
    written = run_export(weights, tmp_path, "--include", "onnx", "--dynamic", "--int8", "--data", str(data),
                         "--calib-images", "2")
    assert written == {"onnx": tmp_path / "tiny.onnx", "onnx-int8": tmp_path / "tiny-int8.onnx"}
    session = onnxruntime.InferenceSession(str(written["onnx-int8"]), providers=["CPUExecutionProvider"])
    for shape in ((1, 3, 64, 64), (2, 3, 96, 128)):
        output = session.run(None, {"images": np.zeros(shape, np.float32)})[0]
        assert output.shape[0] == shape[0] and np.isfinite(output).all()


@pytest.mark.parametrize(("options", "message"), [
    (("--include", "onnx", "--int8"), "--int8 calibrates on the train split of --data"),
    (("--include", "onnx", "--int8", "--data", "d.yaml", "--half"), "--int8 and --half"),
    (("--include", "torchscript", "--int8", "--data", "d.yaml"), "--int8 quantizes the ONNX"),
    (("--include", "onnx", "--int8", "--data", "d.yaml", "--calib-images", "0"), "--calib-images"),
    (("--include", "onnx", "--int8", "--data", "d.yaml", "--opset", "12"), "--int8 needs --opset 13"),
])
def test_int8_flag_errors_are_one_line(weights, tmp_path, capsys, options, message):
    try:
        code = export.main(["--weights", str(weights), "--output-dir", str(tmp_path), *options])
    except SystemExit as stopped:  # argparse's own errors stop in parse_args
        code = stopped.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


class AmctStandIn(ModuleType):
    """amct_onnx's post-training calls with their documented signatures (detect/exporters/amct.py cites the
    source); quantize_model's calibration model is the input itself and save_model's deploy model a copy of it."""

    def __init__(self) -> None:
        super().__init__("amct_onnx")
        self.AMCT_SO = onnxruntime.SessionOptions()
        self.calls: list[tuple[str, dict]] = []

    def create_quant_config(self, config_file, model_file, skip_layers=None, batch_num=1, activation_offset=True,
                            config_defination=None, updated_model=None):
        self.calls.append(("create_quant_config", {"skip_layers": skip_layers, "batch_num": batch_num}))
        assert Path(model_file).is_file() and isinstance(batch_num, int) and batch_num > 0
        Path(config_file).write_text(json.dumps({"batch_num": batch_num, "skip_layers": skip_layers}))

    def quantize_model(self, config_file, model_file, modified_onnx_file, record_file):
        self.calls.append(("quantize_model", {}))
        assert Path(config_file).is_file()
        shutil.copy(model_file, modified_onnx_file)
        Path(record_file).write_text("")

    def save_model(self, modfied_onnx_file, record_file, save_path):
        self.calls.append(("save_model", {}))
        assert Path(record_file).is_file()
        shutil.copy(modfied_onnx_file, f"{save_path}_deploy_model.onnx")
        shutil.copy(modfied_onnx_file, f"{save_path}_fake_quant_model.onnx")


def test_om_int8_runs_amct_then_atc_on_its_deploy_model(weights, data, tmp_path, monkeypatch):
    amct = AmctStandIn()
    monkeypatch.setitem(sys.modules, "amct_onnx", amct)
    runs = []
    monkeypatch.setattr(onnxruntime.InferenceSession, "run",
                        lambda session, outputs, feeds, *rest: runs.append(feeds["images"].shape))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = fake_atc(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}")
    written = run_export(weights, tmp_path / "out", "--include", "om", "--soc-version", "Ascend310P3", "--int8",
                         "--data", str(data), "--calib-images", "5", "--batch-size", "2")
    deploy = tmp_path / "out" / "tiny-int8-amct.onnx"
    assert written["om"] == tmp_path / "out" / "tiny-int8-amct.om"
    assert f"--model={deploy}" in record.read_text().splitlines()
    float_convs, _ = float_nodes(onnx.load(str(tmp_path / "out" / "tiny.onnx")))
    assert [name for name, _ in amct.calls] == ["create_quant_config", "quantize_model", "save_model"]
    assert amct.calls[0][1] == {"skip_layers": float_convs, "batch_num": 2}  # 5 images: two batches of 2
    assert runs == [(2, 3, *IMGSZ)] * 2
    props = {prop.key: json.loads(prop.value) for prop in onnx.load(str(deploy)).metadata_props}
    assert props["int8"] is True and props["batch"] == 2
    assert inspect.signature(AmctStandIn.save_model).parameters.keys() >= {"record_file", "save_path"}


def test_om_int8_without_amct_names_what_to_install(weights, data, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "amct_onnx", None)  # import fails as when it is not installed
    code = export.main(["--weights", str(weights), "--imgsz", "64", "--include", "om", "--soc-version",
                        "Ascend910B3", "--int8", "--data", str(data), "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "amct_onnx" in err and "CANN" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
@needs_shared
def test_int8_yolov5n_keeps_the_fp32_map_on_coco128(tmp_path, coco128_workdir):
    # At 320, a quarter of 640's pixels: 12 s against 34-41 s (docs/deploy.md, "INT8", has 640: +0.00004 at 0.5:0.95
    # and -0.0068 at 0.5); at 320, 2026-12-06: 0.2975 -> 0.3011 and 0.4718 -> 0.4732. The bound is 0.01.
    written = export.run(weights=str(YOLOV5N), include=("onnx",), int8=True, data="coco128.yaml",
                         output_dir=str(tmp_path), imgsz=(320, 320))
    results = {}
    for kind in ("onnx", "onnx-int8"):
        results[kind] = val.validate(val.parse_args(
            ["--weights", str(written[kind]), "--data", "coco128.yaml", "--batch-size", "1", "--imgsz", "320",
             "--device", "cpu", "--project", str(tmp_path / kind), "--no-progress"])).metrics
    assert results["onnx"].map50_95 == pytest.approx(0.2975, abs=0.002)  # the fp32 export is itself sound
    assert results["onnx-int8"].map50_95 >= results["onnx"].map50_95 - 0.01
    assert results["onnx-int8"].map50 >= results["onnx"].map50 - 0.01


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
                    reason='OpenVINO and NNCF are optional (pip install "detect-trainer[openvino]")')
def test_int8_for_openvino_is_nncfs_ir_and_check_scores_it(weights, data, tmp_path, caplog):
    from detect.backend.openvino_runtime import shared_core
    from detect.inference.runtimes.openvino_model import OpenVinoInference

    with caplog.at_level(logging.INFO, logger="detect.export"):
        written = run_export(weights, tmp_path, "--include", "openvino", "--int8", "--data", str(data),
                             "--calib-images", "2", "--check", "--imgsz", "64")  # square: --check letterboxes
    xml = tmp_path / "tiny-int8_openvino_model" / "tiny-int8.xml"
    assert written == {"onnx": tmp_path / "tiny.onnx", "openvino": tmp_path / "tiny_openvino_model" / "tiny.xml",
                       "openvino-int8": xml}  # OpenVINO asked for: NNCF's recipe, not ONNX Runtime's
    core = shared_core("the test")
    ops = [op.get_type_name() for op in core.read_model(str(xml)).get_ops()]
    assert ops.count("FakeQuantize") > 50

    def rt_info(path: Path) -> dict:
        section = core.read_model(str(path)).get_rt_info()["detect"]
        return {key: json.loads(value.astype(str)) for key, value in section.items()}

    assert rt_info(xml) == {**rt_info(written["openvino"]), "int8": True}
    images = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    fp32, int8 = (OpenVinoInference(path, select("cpu"))(images) for path in (written["openvino"], xml))
    assert int8.shape == fp32.shape and torch.isfinite(int8).all()
    (table,) = [record.getMessage() for record in caplog.records if record.getMessage().startswith("--check")]
    rows = {line.split()[0]: line.split() for line in table.splitlines()[2:]}
    assert list(rows) == ["pytorch", "onnx", "openvino", "openvino-int8"]
    assert all(float(row[2]) >= 0 for row in rows.values())  # every file scored: mAP50-95 is a number
