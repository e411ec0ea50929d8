"""The shared inference path: a fused, channels_last, sliced PyTorch model and an onnxruntime session both keep the
predict contract; a static export pads its batch; its metadata names the classes (ours, and yolov5's dict form)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import torch

from detect import backend as backends
from detect.data.loader import val_input_size
from detect.errors import UserError
from detect.exporters.onnx_export import export_onnx
from detect.exporters.torchscript import ExportSettings, export_metadata, traced_module
from detect.inference.model import load_inference_model
from detect.inference.runtimes.onnx_model import OnnxInference
from detect.inference.runtimes.torch_model import TorchInference
from detect.models import build_model
from tests.exporters.helpers import assert_static_batches_cut_and_padded

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
    assert all(m.inplace for m in inference.model.modules() if isinstance(m, torch.nn.SiLU))
    torch.testing.assert_close(inference(images), expected, atol=1e-4, rtol=1e-4)


def test_silu_in_place_changes_no_output():
    images = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    inference = TorchInference(tiny_model(), backends.select("cpu"))
    expected = inference(images)
    for module in inference.model.modules():
        if isinstance(module, torch.nn.SiLU):
            module.inplace = False
    assert torch.equal(inference(images), expected)


PAGE_FAULTS = """
import resource, sys, torch
from detect import backend
from detect.config import load_hyp
from detect.inference.runtimes.torch_model import TorchInference
from detect.models import build_model
from detect.training.step import StepRecipe, build_parts
from detect.training.optim import OptimSettings
cpu, model = backend.select("cpu"), build_model("yolov5n.yaml", num_classes=2)
if sys.argv[1] == "inference":
    TorchInference(model, cpu)
elif sys.argv[1] == "training":
    build_parts(model, cpu, StepRecipe(load_hyp(), OptimSettings.from_hyp(load_hyp()), 16, 320))
faults = []
for _ in range(12):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(2**24).sum()  # 64 MB, above glibc's largest mmap threshold; freed at once
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(faults[-1])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and getrusage's fault count")
def test_cpu_inference_and_training_reuse_freed_memory_instead_of_faulting_it_in_again():
    # A 64 MB tensor freed and made again: glibc unmaps and re-faults its 16,384 pages unless the backend has
    # turned mmap and trimming off (the cost of every large activation in a forward and backward pass), which
    # TorchInference and the training step do (Backend.prepare_steps). Fresh processes, since the setting is
    # process-wide. The steady state is compared: with glibc 2.36 a prepared process still faults the pages in
    # for its first 4-5 tensors (torch's 64-byte aligned allocations only fit a freed chunk once the heap has grown
    # enough), then never again; a plain process faults them every time.
    faults = {mode: int(subprocess.run([sys.executable, "-c", PAGE_FAULTS, mode], capture_output=True, text=True,
                                       check=True).stdout) for mode in ("plain", "inference", "training")}
    assert faults["plain"] > 10_000 and faults["inference"] < 1_000 and faults["training"] < 1_000, faults


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
    assert_static_batches_cut_and_padded(inference, model)
    with pytest.raises(UserError, match="validation letterboxes to squares"):
        val_input_size(640, inference.stride, inference.fixed_shape)


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
    assert OnnxInference(yolov5, cpu).names == tuple(NAMES) and OnnxInference(yolov5, cpu).imgsz is None
    assert OnnxInference(path, cpu).imgsz == (64, 96)  # ours records the size it was exported at
    odd = rewrite_metadata(path, tmp_path / "odd.onnx", stride="32", names=str(NAMES), imgsz="[64, 0]")
    with pytest.raises(UserError, match=r"odd\.onnx: its 'imgsz' metadata \[64, 0\] is not \[height, width\] in pixels$"):
        OnnxInference(odd, cpu)
    bare = rewrite_metadata(path, tmp_path / "bare.onnx")
    with pytest.raises(UserError, match="no 'names' metadata"):
        OnnxInference(bare, cpu)
    code = rewrite_metadata(path, tmp_path / "code.onnx", stride="32", names="__import__('os').system('true')")
    with pytest.raises(UserError, match="that is a list of class names"):
        OnnxInference(code, cpu)
    with pytest.raises(UserError, match="--half does not apply"):
        load_inference_model(path, cpu, half=True)


def test_validation_size_is_rounded_up_to_the_models_stride(caplog):
    # As yolov5's val.py: a P6 model (stride 64) asked for 100 px evaluates at 128, with a warning.
    inference = TorchInference(build_model("yolov5n6.yaml", num_classes=3, names=NAMES), backends.select("cpu"))
    assert inference.stride == 64 and val_input_size(128, inference.stride) == 128 and not caplog.records
    assert val_input_size(100, inference.stride) == 128
    assert "--imgsz 100 is not a multiple of the model's stride 64: evaluating at 128" in caplog.text


@pytest.mark.parametrize("command, required", [("predict", []), ("track", ["--source", "clip.mp4"]), ("export", []),
                                               ("serve.__main__", ["--weights", "yolov5n.pt"])])
def test_each_inference_command_takes_one_side_or_height_width(command, required):
    parse_args = importlib.import_module(f"detect.{command}").parse_args
    assert parse_args([*required, "--imgsz", "320", "256"]).imgsz == (320, 256)
    with pytest.raises(UserError, match=r"^--imgsz 320 320 320: one side or height width$"):
        parse_args([*required, "--imgsz", "320", "320", "320"])
