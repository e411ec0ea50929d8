"""The failures other trainers met on their first 910B, checked on the NPU stand-in where it can show them:
gradient clipping's _foreach_norm and internal formats (ultralytics #22270), NMS that fell back to a Python loop with a
time limit (ultralytics #25954), torchvision ops on NPU tensors, and the GradScaler's host syncs per step."""

from __future__ import annotations

import pytest
import torch

from detect.ops.nms import non_max_suppression
from detect.tools.workload import build_tool_model
from tests.backend.test_npu_standin_ops import one_step
from tests.npu_standin import call_names, host, npu_backend
from tests.ops.test_nms import make_prediction


@pytest.fixture
def model():
    return build_tool_model("yolov5n.yaml", None, 80, seed=0)


def gradients(count: int = 4) -> list[torch.nn.Parameter]:
    parameters = [torch.nn.Parameter(torch.ones(8, 3, 3, 3)) for _ in range(count)]
    for parameter in parameters:
        parameter.grad = torch.full_like(parameter, 0.5)
    return parameters


def test_internal_formats_stay_off_so_gradient_clipping_runs(monkeypatch):
    backend = npu_backend(monkeypatch)
    assert ("config.allow_internal_format", (False,), {}) in backend.torch_npu.calls  # set, not left to a default
    norm = torch.nn.utils.clip_grad_norm_(gradients(), max_norm=10.0)
    assert norm.item() == pytest.approx(0.5 * (4 * 8 * 27) ** 0.5)
    # With internal formats on, the stand-in refuses as the 910B did in #22270: clip_grad_norm_'s foreach path.
    backend.torch_npu.npu.config.allow_internal_format = True
    with pytest.raises(RuntimeError, match="^Current operator _foreach_norm do not support internal format"):
        torch.nn.utils.clip_grad_norm_(gradients(), max_norm=10.0)


@pytest.mark.parametrize("boxes", [50, 400])
def test_nms_on_the_npu_is_one_kernel_call_per_batch_never_a_python_loop(monkeypatch, boxes):
    """#25954: with torchvision's NMS switched off, a Python NMS hit its time limit on every batch. Ours calls
    npu_nms_v4 once per batch whatever the candidate count (no loop, no time limit), on padded buckets, and keeps what
    torchvision keeps on the host."""
    prediction = make_prediction(torch.Generator().manual_seed(boxes), images=3, boxes=boxes, classes=20)
    with host():
        expected = non_max_suppression(prediction, 0.001, 0.6, nms=torch.ops.torchvision.nms)
    backend = npu_backend(monkeypatch)
    events = []
    backend.torch_npu.op_check.on_op = events.append
    found = non_max_suppression(prediction, 0.001, 0.6, **backend.nms_arguments())
    calls = [call for call in backend.torch_npu.calls if call[0] == "npu_nms_v4"]
    assert len(calls) == 1 and calls[0][1][1] % 1024 == 0
    assert [len(rows) for rows in found] == [len(rows) for rows in expected]
    for ours, theirs in zip(found, expected):
        torch.testing.assert_close(ours, theirs)
    names = {event.op for event in events}
    assert "npu::npu_nms_v4" in names and "aten::nonzero" in names  # the device's branch, not numpy's
    assert not {name for name in names if name.startswith("torchvision::")}  # no torchvision op on an NPU tensor


def test_torch_npus_scaler_syncs_with_the_host_three_times_a_step(monkeypatch, model):
    """torch_npu's GradScaler reads a flag with .item() in unscale_, step and update (the stand-in copies its calls,
    torch_npu/npu/amp/grad_scaler.py L260, L331, L499); torch's generic scaler does once, in step."""
    backend = npu_backend(monkeypatch, amp=True)
    events = []
    backend.torch_npu.op_check.on_op = events.append
    one_step(backend, model)
    syncs = [event for event in events if event.op == "aten::_local_scalar_dense"]
    assert len(syncs) == 3
    assert "npu_nms_v4" not in call_names(backend.torch_npu)
