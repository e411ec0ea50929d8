"""An .om through ais_bench's InferSession (a stand-in: tests/ais_bench_standin.py) on an Ascend backend (the
torch_npu stand-in): the export's metadata file, fp16 input and output, static batches, NMS in the graph, errors."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from detect import backend as backends
from detect import predict, val
from detect.errors import UserError
from detect.inference.model import load_inference_model
from detect.inference.predictor import Predictor
from tests import acl_standin, ais_bench_standin
from tests.data.helpers import write_sample, write_yaml
from tests.exporters.helpers import IMGSZ, NAMES, eager, run_export
from tests.npu_standin import call_names, host, npu_backend

select = backends.select  # the real one, before a test stands the NPU in


def export_om(weights: Path, folder: Path, monkeypatch, *options: str) -> Path:
    """`detect.export --include om` with the fake atc on PATH: <stem>.om (the stand-in's) and <stem>.om.json."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    ais_bench_standin.fake_atc(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}")
    written = run_export(weights, folder / "out", "--include", "om", "--soc-version", "Ascend910B3", *options)
    return written["om"]


@pytest.mark.parametrize("io_dtype", [np.float16, np.float32])
def test_om_predicts_like_the_model_with_its_metadata_and_a_static_batch(weights, tmp_path, monkeypatch, io_dtype):
    om = export_om(weights, tmp_path, monkeypatch, "--batch-size", "2")
    metadata = json.loads(om.with_suffix(".om.json").read_text())
    assert metadata["names"] == NAMES and metadata["batch"] == 2 and metadata["soc_version"] == "Ascend910B3"
    standin = ais_bench_standin.install(monkeypatch, io_dtype)
    model = load_inference_model(om, npu_backend(monkeypatch))
    assert model.names == tuple(NAMES) and model.stride == 32 and model.fixed_shape == IMGSZ and model.nms is None
    assert model.input_dtype == io_dtype
    images = torch.rand(3, 3, *IMGSZ)
    got = model(images)
    assert got.dtype == torch.float32
    expected = eager(weights, images)
    assert np.abs(got.numpy() - expected).max() < (0.5 if io_dtype == np.float16 else 1e-3)  # px, fp16 at ~100
    (session,) = standin.sessions
    assert session.device_id == 0 and session.calls == [(2, 3, *IMGSZ)] * 2  # 3 images: a full batch, a padded one


def test_an_om_with_nms_in_its_graph_gives_its_detections(weights, tmp_path, monkeypatch):
    om = export_om(weights, tmp_path, monkeypatch, "--nms", "--conf-thres", "0.002", "--max-det", "20")
    ais_bench_standin.install(monkeypatch)
    backend = npu_backend(monkeypatch)
    model = load_inference_model(om, backend)
    assert model.nms is not None and model.nms.max_det == 20
    images = torch.rand(1, 3, *IMGSZ)
    rows = Predictor(model, model.nms).detections(model(images), backend, conf_threshold=0.002, iou_threshold=0.45,
                                                  max_det=20)
    onnx_model = load_inference_model(om.with_suffix(".onnx"), backends.select("cpu"))
    expected = Predictor(onnx_model, onnx_model.nms).detections(onnx_model(images), backend, conf_threshold=0.002,
                                                                iou_threshold=0.45, max_det=20)
    assert len(rows[0]) == len(expected[0]) > 0
    assert (rows[0][:, :4] - expected[0][:, :4]).abs().max() < 0.5  # fp16 output


def test_what_an_om_needs_is_named_in_one_line(weights, tmp_path, monkeypatch):
    om = export_om(weights, tmp_path, monkeypatch)
    with pytest.raises(UserError, match="runs on an Ascend NPU only"):
        load_inference_model(om, backends.select("cpu"))
    backend = npu_backend(monkeypatch)
    monkeypatch.setitem(sys.modules, "ais_bench", None)
    with pytest.raises(UserError, match=r"running an \.om needs ais_bench and aclruntime"):
        load_inference_model(om, backend)
    ais_bench_standin.install(monkeypatch)
    with pytest.raises(UserError, match="--half does not apply"):
        load_inference_model(om, backend, half=True)
    backend.torch_npu.chip = "Ascend910B2"  # an Atlas 800T A2 of 910B2 cards
    with pytest.raises(UserError) as caught:
        load_inference_model(om, backend)
    assert str(caught.value) == (f"{om} was compiled for Ascend910B3 (its .om.json) but cpu is Ascend910B2: export it "
                                 "again with --soc-version Ascend910B2")
    om.with_suffix(".om.json").unlink()
    with pytest.raises(UserError, match=r"its metadata tiny\.om\.json is missing"):
        load_inference_model(om, backend)


def test_an_om_leaves_torch_npus_context_current(weights, tmp_path, monkeypatch, capsys):
    """aclruntime calls aclInit again (error 100002, printed) and makes an ACL context of its own current on the thread
    where the NPU's NMS runs next (tests/acl_standin.py): the context torch_npu had is made current again after each
    call, so the NMS runs. Before the fix the stand-in refused torch_npu's first op after the .om's."""
    om = export_om(weights, tmp_path, monkeypatch)
    ais_bench_standin.install(monkeypatch)
    backend = npu_backend(monkeypatch)
    backend.set_device()
    model = load_inference_model(om, backend)
    assert "acl init failed, ret 100002" in capsys.readouterr().out
    found = Predictor(model).detections(model(torch.rand(2, 3, *IMGSZ)), backend, conf_threshold=0.001,
                                        iou_threshold=0.6, max_det=300)
    assert len(found) == 2 and "npu_nms_v4" in call_names(backend.torch_npu)
    assert acl_standin.runtime().current == "torch_npu context on device 0"
    monkeypatch.setitem(sys.modules, "acl", None)
    with pytest.raises(UserError, match=r"^running an \.om needs pyACL \(`import acl`"):
        load_inference_model(om, backend)


def test_val_and_predict_commands_take_an_om(weights, tmp_path, monkeypatch):
    """The CLIs with --device npu:0 on the stand-ins score the .om as onnxruntime scores its ONNX (fp16 outputs:
    boxes to 0.5 px) and draw its detections."""
    root = tmp_path / "data"
    for index in range(4):
        write_sample(root, "train", f"im{index}", 96, 128, [(10, 10, 60, 50), (70, 20, 120, 90)])
    data = write_yaml(root)
    om = export_om(weights, tmp_path, monkeypatch, "--batch-size", "2", "--imgsz", "128")  # val letterboxes squares
    ais_bench_standin.install(monkeypatch)
    backend = npu_backend(monkeypatch)
    monkeypatch.setattr(backends, "select", lambda spec, **options: backend if spec == "npu:0" else select(spec))
    found = {}
    for path, device in ((om, "npu:0"), (om.with_suffix(".onnx"), "cpu")):
        with host() if device == "cpu" else contextlib.nullcontext():  # the CPU's run is host code
            run = val.validate(val.parse_args(["--weights", str(path), "--data", str(data), "--imgsz", "128",
                                               "--device", device, "--workers", "0", "--conf-thres", "0.002",
                                               "--batch-size", "2", "--project", str(tmp_path / device),
                                               "--no-progress", "--save-json"]))
        found[device] = (run, json.loads((tmp_path / device / "exp" / "predictions.json").read_text()))
    assert len(found["npu:0"][1]) == len(found["cpu"][1]) > 0
    assert found["npu:0"][0].metrics.map50_95 == pytest.approx(found["cpu"][0].metrics.map50_95, abs=0.01)
    saved = predict.run(weights=str(om), source=str(root / "images" / "train"), device="npu:0", imgsz=[128],
                        project=str(tmp_path / "predict"), conf_thres=0.002)
    assert sorted(path.name for path in saved.glob("*.png")) == [f"im{index}.png" for index in range(4)]
