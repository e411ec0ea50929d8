"""The shared inference path: a fused, channels_last, sliced PyTorch model and an onnxruntime session both keep the
predict contract; a static export pads its batch; its metadata names the classes (ours, and yolov5's dict form)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

from detect import backend as backends
from detect.engine.export_onnx import export_onnx
from detect.engine.exporting import ExportSettings, export_metadata, traced_module
from detect.engine.inference import TorchInference, load_inference_model, square_input_size
from detect.engine.onnx_model import OnnxInference
from detect.errors import UserError
from detect.models import build_model

NAMES = ["cat", "dog", "bird"]


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model("yolov5n.yaml", num_classes=3, names=NAMES)
    for module in model.modules():  # non-trivial BatchNorm statistics, so that fusing is checked
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 2.0)
    return model.eval()


def test_torch_inference_is_the_models_predict_fused_and_channels_last():
    model = tiny_model()
    images = torch.rand(3, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model.predict(images)
    cpu = backends.select("cpu")
    inference = TorchInference(model, cpu)
    assert inference.names == tuple(NAMES) and inference.stride == 32 and inference.fixed_shape is None
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in inference.model.modules())
    stem = next(m for m in inference.model.modules() if isinstance(m, torch.nn.Conv2d))
    assert stem.weight.is_contiguous(memory_format=torch.channels_last) == cpu.channels_last
    torch.testing.assert_close(inference(images), expected, atol=1e-4, rtol=1e-4)


def test_a_batch_runs_in_slices_that_keep_the_stem_output_under_the_budget(monkeypatch):
    model = tiny_model()
    images = torch.rand(5, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    whole = TorchInference(model, backends.select("cpu"))
    whole.slice_bytes = None
    sliced = TorchInference(tiny_model(), backends.select("cpu"))
    per_image = 16 * 32 * 32 * 4  # yolov5n's stem: 16 channels at stride 2, float32
    sliced.slice_bytes = 2 * per_image + 1
    assert whole.slice_size(images) == 5 and sliced.slice_size(images) == 2
    sizes = []
    original = sliced.model.predict
    monkeypatch.setattr(sliced.model, "predict", lambda part: sizes.append(len(part)) or original(part))
    torch.testing.assert_close(sliced(images), whole(images), atol=1e-5, rtol=1e-5)
    assert sizes == [2, 2, 1]


@pytest.fixture(scope="module")
def static_onnx(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    """A static 3-class export, batch 2 at 64x96, and the model it came from."""
    model = tiny_model()
    settings = ExportSettings(imgsz=(64, 96), batch_size=2)
    module, example = traced_module(model, settings, torch.device("cpu"))
    path = export_onnx(module, example, export_metadata(model, settings), settings,
                       tmp_path_factory.mktemp("onnx") / "tiny.onnx")
    return path, tiny_model()


def test_a_static_onnx_cuts_and_pads_any_batch_to_its_own(static_onnx):
    path, model = static_onnx
    inference = load_inference_model(path, backends.select("cpu"))
    assert isinstance(inference, OnnxInference)
    assert inference.names == tuple(NAMES) and inference.stride == 32
    assert inference.fixed_shape == (64, 96) and inference.batch == 2
    images = torch.rand(3, 3, 64, 96, generator=torch.Generator().manual_seed(3))  # 2 + 1 padded
    with torch.no_grad():
        expected = model.predict(images)
    got = inference(images)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert (got - expected).abs().max() < 1e-4
    with pytest.raises(UserError, match="takes 64x96 images only, got 64x64"):
        inference(torch.rand(2, 3, 64, 64))
    with pytest.raises(UserError, match="validation letterboxes to squares"):
        square_input_size(inference, 640)


def rewrite_metadata(source: Path, target: Path, **props: str) -> Path:
    model = onnx.load(str(source))
    del model.metadata_props[:]
    for key, value in props.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(target))
    return target


def test_yolov5_style_names_are_read_safely_and_missing_metadata_is_named(static_onnx, tmp_path):
    path, _ = static_onnx
    cpu = backends.select("cpu")
    yolov5 = rewrite_metadata(path, tmp_path / "v5.onnx", stride="32", names="{0: 'cat', 1: 'dog', 2: 'bird'}")
    assert OnnxInference(yolov5, cpu).names == tuple(NAMES)
    bare = rewrite_metadata(path, tmp_path / "bare.onnx")
    with pytest.raises(UserError, match="no 'names' and 'stride' metadata"):
        OnnxInference(bare, cpu)
    code = rewrite_metadata(path, tmp_path / "code.onnx", stride="32", names="__import__('os').system('true')")
    with pytest.raises(UserError, match="not a list of class names"):
        OnnxInference(code, cpu)
    with pytest.raises(UserError, match="--half does not apply"):
        load_inference_model(path, cpu, half=True)
