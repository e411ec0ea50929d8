"""The NPU kernel lists (detect/backend/npu_ops/*.json, from the torch_npu 2.14.0 wheel and Ascend/op-plugin) and
the dispatch mode that treats each op as torch_npu would: an NPU kernel, a composite checked through what it calls,
a view, a kernel that computes on the CPU, or torch_npu's CPU fallback (warning, or an error as with
TORCH_NPU_FALLBACK_CPU_DISABLE=1)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchvision

from detect.backend.npu_ops import (
    COMPOSITE,
    FALLBACK_DISABLED,
    FALLBACK_WARNING,
    HOST,
    MISSING,
    NPU,
    VIEW,
    NpuFallbackWarning,
    OpCheck,
    npu_kernels,
    verdict,
)

aten = torch.ops.aten


@pytest.fixture(scope="module")
def host_only_composite():
    """detect_test::twice (a CompositeExplicitAutograd op) that calls detect_test::on_host (a CPU kernel only)."""
    library = torch.library.Library("detect_test", "FRAGMENT")
    library.define("on_host(Tensor x) -> Tensor")
    library.define("twice(Tensor x) -> Tensor")
    library.impl("on_host", lambda x: x * 2, "CPU")
    library.impl("twice", lambda x: torch.ops.detect_test.on_host(x), "CompositeExplicitAutograd")
    yield torch.ops.detect_test.twice.default
    library._destroy()


def test_the_lists_name_their_sources():
    kernels = npu_kernels()
    assert kernels.torch_npu_source == "torch_npu 2.14.0"
    assert kernels.op_plugin_source.startswith("op-plugin v2.14 (")
    assert len(kernels.registered) > 1000 and kernels.own < kernels.registered
    assert "_foreach_norm" in kernels.refuse_internal_format  # the 910B failure of ultralytics #22270


@pytest.mark.parametrize(("op", "kind", "source"), [
    (aten.convolution.default, NPU, "op-plugin v2.14"),
    (aten._to_copy.default, NPU, "torch_npu 2.14.0"),  # torch_npu's own registration
    (aten._fused_adam_.default, HOST, "a kernel that runs on the CPU"),  # listed, yet it warns and runs on the CPU
    (aten.expand.default, VIEW, "torch CompositeExplicitAutograd"),
    (aten._foreach_mul_.Tensor, COMPOSITE, "torch CompositeExplicitAutograd"),
    (torch.ops.c10d.allreduce_.default, NPU, "PrivateUse1 kernel"),
    (torch.ops.torchvision.nms.default, MISSING, "none in torch_npu 2.14.0"),
])
def test_verdicts_follow_the_dispatchers_order(op, kind, source):
    assert verdict(op).kind == kind
    assert source in verdict(op).source


def test_a_step_of_a_small_network_runs_on_npu_kernels_only():
    events = []
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.SiLU())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    with OpCheck(events.append, fallback="raise"):
        model(torch.randn(2, 3, 8, 8)).sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimizer.step()
    names = {event.op for event in events}
    assert {"aten::convolution_backward", "aten::native_batch_norm", "aten::_foreach_norm.Scalar"} <= names
    assert all(event.verdict.covered for event in events)
    # the composite _foreach_mul_.Tensor is checked through the ops its kernel calls
    assert any(event.via == ("aten::_foreach_mul_.Tensor",) for event in events)


def test_an_op_without_a_kernel_raises_as_with_fallback_disabled():
    with pytest.raises(RuntimeError) as error, OpCheck(fallback="raise"):
        torchvision.ops.nms(torch.rand(4, 4), torch.rand(4), 0.5)
    assert str(error.value) == FALLBACK_DISABLED.format(op="torchvision::nms", through="dispatcher backend fallback")


def test_a_kernel_that_runs_on_the_cpu_raises_naming_it():
    tensors = [[torch.ones(2)], [torch.ones(2)], [torch.zeros(2)], [torch.zeros(2)], [], [torch.tensor(1.0)]]
    with pytest.raises(RuntimeError, match="'aten::_fused_adam_' would execute its main computation on CPU through "
                                           "explicit CPU kernel"), OpCheck(fallback="raise"):
        torch._fused_adam_(*tensors, lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=False,
                           maximize=False)


def test_the_default_fallback_warns_once_per_op_and_computes():
    boxes, scores = torch.tensor([[0.0, 0, 10, 10], [1, 1, 10, 10]]), torch.tensor([0.9, 0.8])
    with warnings.catch_warnings(record=True) as caught, OpCheck(fallback="warn"):
        warnings.simplefilter("always")
        first = torchvision.ops.nms(boxes, scores, 0.5)
        torchvision.ops.nms(boxes, scores, 0.5)
    assert first.tolist() == [0]
    messages = [str(w.message) for w in caught if issubclass(w.category, NpuFallbackWarning)]
    assert messages == [FALLBACK_WARNING.format(op="torchvision::nms")]
    assert messages[0].startswith("CAUTION: The operator 'torchvision::nms' is not currently supported on the NPU")


def test_a_composite_is_refused_for_what_it_calls(host_only_composite):
    assert verdict(host_only_composite).kind == COMPOSITE
    events, ones = [], torch.ones(2)
    with OpCheck(events.append, fallback="run"):
        assert host_only_composite(ones).tolist() == [2.0, 2.0]
    assert [(event.op, event.verdict.kind, event.via) for event in events][:2] == [
        ("detect_test::twice", COMPOSITE, ()), ("detect_test::on_host", MISSING, ("detect_test::twice",))]
    with pytest.raises(RuntimeError, match="'detect_test::on_host' would execute"), OpCheck(fallback="raise"):
        host_only_composite(torch.ones(2))
