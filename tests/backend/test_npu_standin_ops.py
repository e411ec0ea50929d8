"""The NPU stand-in does what torch_npu 2.14 does for an op without an NPU kernel: an error naming the op (as with
TORCH_NPU_FALLBACK_CPU_DISABLE=1, the stand-in's default) or torch_npu's warning; and a new uncovered op in the
training step fails the step (one is added on purpose here)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchvision

from detect.backend.npu_ops import FALLBACK_WARNING, NpuFallbackWarning
from detect.data.device_batch import to_device_batch
from detect.tools.throughput import _parts
from detect.tools.workload import build_tool_model, synthetic_batch
from detect.training.step import backward, forward_loss, optimizer_step
from tests.npu_standin import npu_backend


def one_step(backend, model) -> None:
    """The trainer's step on a batch of two 64 px images: forward, loss, scaled backward, unscale, clip, SGD, EMA."""
    parts = _parts(model, backend, 64, 2)
    batch = to_device_batch(synthetic_batch(2, 64, 80, seed=0), backend)
    backward(parts, forward_loss(parts, batch)[0])
    optimizer_step(parts)


@pytest.fixture
def model():
    return build_tool_model("yolov5n.yaml", None, 80, seed=0)


def test_the_standin_refuses_an_op_without_an_npu_kernel(monkeypatch):
    npu_backend(monkeypatch)
    with pytest.raises(RuntimeError) as error:
        torchvision.ops.nms(torch.rand(8, 4), torch.rand(8), 0.5)
    assert str(error.value) == ("The operator 'torchvision::nms' would execute its main computation on CPU through "
                                "dispatcher backend fallback, but CPU fallback is disabled by "
                                "TORCH_NPU_FALLBACK_CPU_DISABLE=1.")


def test_the_standin_refuses_a_kernel_that_runs_on_the_cpu(monkeypatch):
    npu_backend(monkeypatch)
    parameter = torch.nn.Parameter(torch.ones(3))
    parameter.grad = torch.ones(3)
    optimizer = torch.optim.Adam([parameter], fused=True)  # docs/torch-npu.md: _fused_adam_ runs on the CPU
    with pytest.raises(RuntimeError, match="'aten::_fused_adam_' would execute its main computation on CPU through "
                                           "explicit CPU kernel"):
        optimizer.step()


def test_with_the_default_fallback_the_standin_warns_and_computes(monkeypatch):
    npu_backend(monkeypatch, fallback="warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = torchvision.ops.nms(torch.tensor([[0.0, 0, 9, 9], [0, 0, 9, 9]]), torch.tensor([0.9, 0.8]), 0.5)
    assert kept.tolist() == [0]
    assert [str(w.message) for w in caught if w.category is NpuFallbackWarning] == [
        FALLBACK_WARNING.format(op="torchvision::nms")]


def test_the_training_step_runs_on_npu_kernels(monkeypatch, model):
    backend = npu_backend(monkeypatch, amp=True)
    events = []
    backend.torch_npu.op_check.on_op = events.append
    one_step(backend, model)
    names = {event.op for event in events}
    assert {"aten::convolution_backward", "aten::_amp_foreach_non_finite_check_and_unscale_",
            "aten::_foreach_norm.Scalar", "aten::upsample_nearest2d_backward"} <= names
    assert all(event.verdict.covered for event in events)


def test_a_new_uncovered_op_in_the_step_fails_it(monkeypatch, model):
    backend = npu_backend(monkeypatch, amp=True)
    # On purpose: a head that reads its objectness through torch.logit, whose NPU kernel runs on the CPU in 2.14
    # ("CAUTION: The operator aten::logit, aten::logit_ and aten::logit.out is currently not supported ...").
    model.detect.register_forward_hook(lambda module, inputs, outputs: [torch.logit(level.sigmoid()) for level in outputs])
    with pytest.raises(RuntimeError, match="'aten::logit' would execute its main computation on CPU"):
        one_step(backend, model)
