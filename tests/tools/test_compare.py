"""python -m detect.tools.compare: a perturbed layer is found and named first; bf16 is really applied; bad input."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from detect import backend as backends
from detect.models.safe_io import save_checkpoint
from detect.models.weights import model_state
from detect.tools import compare
from detect.tools.capture import capture, difference, differences
from detect.tools.workload import build_tool_model, synthetic_batch

PERTURBED = 5  # yolov5n's layer 5 is a Conv in the backbone


@pytest.fixture(scope="module")
def model():
    return build_tool_model("yolov5n.yaml", None, num_classes=3, seed=0)


def perturbed(model, layer: int = PERTURBED):
    """A copy whose layer `layer` has seeded noise added to its convolution weight."""
    other = copy.deepcopy(model)
    weight = other.model[layer].conv.weight
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        weight += 0.2 * weight.std() * torch.randn(weight.shape, generator=generator)
    return other


def test_the_perturbed_layer_is_the_first_that_drifts(model):
    batch = synthetic_batch(2, 64, model.nc, seed=0)
    cpu = backends.select("cpu", amp=False)
    outputs, losses, gradients = differences(capture(model, batch, cpu, 64), capture(perturbed(model), batch, cpu, 64))
    assert all(d.max_abs == 0 for d in outputs[:PERTURBED])  # fp32 on one device is bit-exact before it
    assert compare.first_drift(outputs, 0.05).name == f"model.{PERTURBED} Conv"
    assert losses[0].max_abs > 0 and gradients[-1].max_abs > 0


def test_two_checkpoints_through_the_cli(model, tmp_path, capsys):
    paths = []
    for name, weights in (("a.pt", model), ("b.pt", perturbed(model))):
        paths.append(save_checkpoint(tmp_path / name, {"model": model_state(weights)}))
    code = compare.main(["--weights", str(paths[0]), "--weights-b", str(paths[1]), "--device", "cpu",
                         "--imgsz", "64", "--batch-size", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[0].startswith(f"A: cpu fp32 {paths[0]} | B: cpu fp32 {paths[1]} | train mode")
    flagged = [line for line in lines if line.endswith("<- first past the tolerance")]
    assert flagged[0].startswith(f"model.{PERTURBED} Conv")
    assert lines[-1].startswith(f"first past 0.05: outputs model.{PERTURBED} Conv;")


def test_cpu_default_compares_fp32_with_bf16(capsys):
    code = compare.main(["--cfg", "yolov5n.yaml", "--nc", "2", "--device", "cpu", "--imgsz", "64",
                         "--batch-size", "1", "--mode", "eval", "--tolerance", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[0].startswith("A: cpu fp32 yolov5n.yaml | B: cpu bf16 yolov5n.yaml | eval mode")
    first_layer = next(line for line in lines if line.startswith("model.0 Conv")).split()
    assert 0 < float(first_layer[-1]) < 0.05  # bf16 rounding is there, and small in the first layer
    assert sum(line.startswith("model.") for line in lines) == 25 + 19  # outputs of 25 layers, 19 with parameters
    assert lines[-1] == "first past 1.0: outputs none; gradients (from the head) none"


def test_difference_of_non_finite_and_zero_tensors():
    zeros = torch.zeros(4, dtype=torch.float64)
    assert difference("x", zeros, zeros).mean_rel == 0 and not difference("x", zeros, zeros).drifts(0)
    assert math.isinf(difference("x", zeros, zeros + 1).mean_rel)
    broken = difference("x", torch.ones(4, dtype=torch.float64), torch.tensor([1, 1, math.nan, 1.0]))
    assert math.isinf(broken.mean_rel) and broken.drifts(1e9)


@pytest.mark.parametrize("argv, message", [
    (["--precision-b", "fp16"], "AMP dtype fp16 is not supported on cpu"),
    (["--tolerance", "2"], "argument --tolerance: must be a number in [0, 1], got '2'"),
])
def test_bad_input_is_one_line(argv, message, capsys):
    try:
        code = compare.main(["--device", "cpu", "--imgsz", "64", "--batch-size", "1", *argv])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]


def test_different_architectures_are_refused(tmp_path, capsys):
    paths = [save_checkpoint(tmp_path / f"{nc}.pt", {"model": model_state(build_tool_model("yolov5n.yaml", None, nc,
                                                                                            seed=0))})
             for nc in (2, 3)]
    code = compare.main(["--weights", str(paths[0]), "--weights-b", str(paths[1]), "--device", "cpu",
                         "--imgsz", "64", "--batch-size", "1"])
    assert code == 2
    assert "hold different architectures" in capsys.readouterr().err


def test_a_second_device_keeps_the_precision(capsys):
    code = compare.main(["--nc", "2", "--device", "cpu", "--device-b", "cpu", "--imgsz", "64", "--batch-size", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and lines[0].startswith("A: cpu fp32 yolov5n.yaml | B: cpu fp32 yolov5n.yaml")
    assert lines[-1] == "first past 0.05: outputs none; gradients (from the head) none"  # same device: bit-exact
