"""`python -m detect.export`: TorchScript and ONNX equal the eager model, the ONNX checks and runs in onnxruntime
(static and dynamic), the exporter choice needs no onnxscript, and om goes through CANN's atc (a fake one here)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from detect import export, val
from detect.exporters.torchscript import TORCHSCRIPT_METADATA
from detect.models import build_model
from detect.models.safe_io import save_checkpoint
from detect.models.weights import load_model, model_state

# torch 2.14 marks torch.jit.load deprecated; loading the TorchScript file is what these tests check.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
NAMES = ["cat", "dog", "bird"]
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
YOLOV5N = SHARED / "weights" / "yolov5n.pt"
COCO128 = SHARED / "data" / "coco128"
IMGSZ = (96, 128)  # (h, w), small so tracing and exporting stay fast


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """An untrained 3-class yolov5n checkpoint with non-trivial BatchNorm statistics (so fusing is exercised)."""
    torch.manual_seed(0)
    model = build_model("yolov5n.yaml", num_classes=len(NAMES), names=NAMES)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 2.0)
    return save_checkpoint(tmp_path_factory.mktemp("weights") / "tiny.pt", {"model": model_state(model)})


def run_export(weights: Path, out: Path, *options: str) -> dict[str, Path]:
    args = export.parse_args(["--weights", str(weights), "--imgsz", *map(str, IMGSZ), "--output-dir", str(out),
                              *options])
    return export.export(args)


def eager(weights: Path, images: torch.Tensor) -> np.ndarray:
    """The unfused eager model's decoded predictions: what every export must reproduce."""
    with torch.no_grad():
        return load_model(weights).predict(images).numpy()


def onnx_outputs(path: Path, images: torch.Tensor) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"images": images.numpy().astype(np.float32)})[0]


@pytest.fixture(scope="module")
def static_exports(weights, tmp_path_factory) -> dict[str, Path]:
    # onnxscript blocked: the export must not need the dynamo exporter's package (ENV-NOTES.md); the legacy
    # exporter is chosen on purpose (dynamo=False) and writes the requested opset natively.
    blocked = pytest.MonkeyPatch()
    blocked.setitem(sys.modules, "onnxscript", None)
    try:
        return run_export(weights, tmp_path_factory.mktemp("static"), "--include", "torchscript", "onnx",
                          "--opset", "12")
    finally:
        blocked.undo()


def test_onnx_passes_the_checker_and_equals_pytorch_at_batch_1(weights, static_exports):
    path = static_exports["onnx"]
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert [entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")] == [12]
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [1, 3, *IMGSZ]
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(1))
    expected = eager(weights, images)
    assert expected.shape == (1, 3 * sum((IMGSZ[0] // s) * (IMGSZ[1] // s) for s in (8, 16, 32)), 8)
    assert np.abs(onnx_outputs(path, images) - expected).max() < 1e-4


def test_metadata_travels_in_both_exports(static_exports):
    expected = {"producer": "detect", "names": NAMES, "stride": 32, "imgsz": list(IMGSZ), "batch": 1,
                "dynamic": False, "half": False}
    props = {prop.key: json.loads(prop.value) for prop in onnx.load(str(static_exports["onnx"])).metadata_props}
    assert props == expected
    files = {TORCHSCRIPT_METADATA: ""}
    torch.jit.load(str(static_exports["torchscript"]), _extra_files=files)
    assert json.loads(files[TORCHSCRIPT_METADATA]) == expected


def test_torchscript_equals_eager(weights, static_exports):
    traced = torch.jit.load(str(static_exports["torchscript"]))
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        np.testing.assert_allclose(traced(images).numpy(), eager(weights, images), rtol=0, atol=1e-4)


def test_no_fuse_keeps_batchnorm_in_the_torchscript_graph(weights, static_exports, tmp_path):
    unfused = torch.jit.load(str(run_export(weights, tmp_path, "--no-fuse")["torchscript"]))
    fused = torch.jit.load(str(static_exports["torchscript"]))
    assert "batch_norm" in str(unfused.inlined_graph) and "batch_norm" not in str(fused.inlined_graph)
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        np.testing.assert_allclose(unfused(images).numpy(), eager(weights, images), rtol=0, atol=1e-4)


def test_dynamic_onnx_equals_pytorch_at_batch_3_and_another_size(weights, tmp_path):
    path = run_export(weights, tmp_path, "--include", "onnx", "--dynamic")["onnx"]
    onnx.checker.check_model(onnx.load(str(path)))
    for shape in ((3, 3, *IMGSZ), (2, 3, 64, 160)):
        images = torch.rand(*shape, generator=torch.Generator().manual_seed(3))
        assert np.abs(onnx_outputs(path, images) - eager(weights, images)).max() < 1e-4


def test_simplify_keeps_outputs_with_fewer_nodes_and_standard_operators(weights, static_exports, tmp_path):
    path = run_export(weights, tmp_path, "--include", "onnx", "--simplify", "--opset", "12")["onnx"]
    simplified, plain = onnx.load(str(path)), onnx.load(str(static_exports["onnx"]))
    onnx.checker.check_model(simplified)
    assert len(simplified.graph.node) < len(plain.graph.node)
    assert {node.domain for node in simplified.graph.node} == {""}
    assert {entry.domain for entry in simplified.opset_import} <= {"", "ai.onnx"}
    assert {prop.key for prop in simplified.metadata_props} == {prop.key for prop in plain.metadata_props}
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(4))
    assert np.abs(onnx_outputs(path, images) - eager(weights, images)).max() < 1e-4


def test_half_export_takes_fp16_input(weights, tmp_path):
    path = run_export(weights, tmp_path, "--include", "onnx", "--half")["onnx"]
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(float16)"
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(5))
    got = session.run(None, {"images": images.numpy().astype(np.float16)})[0].astype(np.float32)
    expected = eager(weights, images)
    np.testing.assert_allclose(got[..., :4], expected[..., :4], rtol=0, atol=0.5)  # pixels, fp16 steps <= 0.125
    np.testing.assert_allclose(got[..., 4:], expected[..., 4:], rtol=0, atol=5e-3)


def fake_atc(folder: Path, exit_code: int = 0) -> Path:
    """An `atc` that records its arguments (one per line) and, when it succeeds, writes <--output>.om."""
    record = folder / "atc_args.txt"
    script = folder / "atc"
    script.write_text(f"""#!{sys.executable}
import sys
from pathlib import Path
Path({str(record)!r}).write_text("\\n".join(sys.argv[1:]))
if {exit_code}:
    print("E19999: Inner Error, the soc version is not supported", file=sys.stderr)
    sys.exit({exit_code})
output = next(arg.split("=", 1)[1] for arg in sys.argv[1:] if arg.startswith("--output="))
Path(output + ".om").write_bytes(b"om")
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return record


def test_om_runs_atc_with_a_static_shape_for_the_chosen_chip(weights, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = fake_atc(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}")
    written = run_export(weights, tmp_path / "out", "--include", "om", "--soc-version", "Ascend310P3",
                         "--batch-size", "2")
    onnx_path = tmp_path / "out" / "tiny.onnx"
    assert written == {"onnx": onnx_path, "om": tmp_path / "out" / "tiny.om"}
    assert record.read_text().splitlines() == [
        f"--model={onnx_path}", "--framework=5", f"--output={tmp_path / 'out' / 'tiny'}",
        "--soc_version=Ascend310P3", f"--input_shape=images:2,3,{IMGSZ[0]},{IMGSZ[1]}", "--input_format=NCHW",
        "--log=error"]
    assert [d.dim_value for d in onnx.load(str(onnx_path)).graph.input[0].type.tensor_type.shape.dim] == [2, 3, *IMGSZ]


def test_om_without_atc_writes_the_onnx_and_prints_the_command(weights, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with caplog.at_level("WARNING"):
        written = run_export(weights, tmp_path, "--include", "om", "--soc-version", "Ascend910B3")
    assert written == {"onnx": tmp_path / "tiny.onnx"} and not (tmp_path / "tiny.om").exists()
    assert "atc (CANN's model converter) is not on PATH" in caplog.text
    assert f"atc --model={tmp_path / 'tiny.onnx'} --framework=5" in caplog.text
    assert "--soc_version=Ascend910B3" in caplog.text


def test_a_failing_atc_is_one_line_and_exit_2(weights, tmp_path, monkeypatch, capsys):
    fake_atc(tmp_path, exit_code=1)
    monkeypatch.setenv("PATH", f"{tmp_path}:{Path(sys.executable).parent}")
    code = export.main(["--weights", str(weights), "--imgsz", "64", "--include", "om", "--soc-version", "Ascend999",
                        "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "atc failed with exit code 1: E19999: Inner Error" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("options, message", [
    (["--include", "om"], "needs --soc-version"),
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
@pytest.mark.skipif(not (YOLOV5N.is_file() and COCO128.is_dir()), reason=f"shared weights or coco128 absent: {SHARED}")
def test_val_of_the_exported_yolov5n_onnx_gives_the_pt_map(tmp_path):
    # A --dynamic export takes val's rectangular batches as the .pt does; a static one is scored on square
    # letterboxed inputs (0.359 here), as yolov5 scores its exports.
    onnx_path = export.export(export.parse_args(["--weights", str(YOLOV5N), "--include", "onnx", "--dynamic",
                                              "--output-dir", str(tmp_path)]))["onnx"]
    results = {}
    for weights in (YOLOV5N, onnx_path):
        results[weights.suffix] = val.validate(val.parse_args(
            ["--weights", str(weights), "--data", "coco128.yaml", "--batch-size", "16", "--device", "cpu",
             "--project", str(tmp_path / weights.suffix[1:]), "--no-progress"])).metrics
    assert results[".pt"].map50_95 == pytest.approx(0.370, abs=0.002)
    assert results[".onnx"].map50_95 == pytest.approx(results[".pt"].map50_95, abs=0.001)
    assert results[".onnx"].map50 == pytest.approx(results[".pt"].map50, abs=0.001)


def test_a_model_yaml_exports_without_weights(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --cfg writes into the working folder
    written = export.main(["--cfg", "yolov5n.yaml", "--nc", "3", "--img", "64", "--include", "onnx"])
    assert written == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "yolov5n.onnx"), providers=["CPUExecutionProvider"])
    outputs = session.run(None, {session.get_inputs()[0].name: np.zeros((1, 3, 64, 64), np.float32)})
    assert outputs[0].shape == (1, 3 * (8 * 8 + 4 * 4 + 2 * 2), 5 + 3)
