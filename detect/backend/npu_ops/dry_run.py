"""The NPU backend run on the host without torch_npu, for `python -m detect.doctor --ops`: NpuBackend's own code paths
(fp16 autocast, torch_npu's GradScaler and its host syncs, npu_nms_v4 on padded candidates, the NPU's NMS branches)
with tensors on the CPU, so that OpCheck sees the ops a 910B would run. It computes on the CPU what the few torch_npu
calls would return; it says nothing of speed or numerics on a card (tests/npu_standin.py checks the calls' contracts).
"""

from __future__ import annotations

import functools
from types import ModuleType, SimpleNamespace

import torch

from detect.backend.base import _torchvision_nms
from detect.backend.npu import NpuBackend

# torch_npu's schema (torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml L644, docs/torch-npu.md, "NMS on the NPU").
NPU_NMS_V4_SCHEMA = ("npu_nms_v4(Tensor self, Tensor scores, Scalar max_output_size, Tensor iou_threshold, "
                     "Tensor scores_threshold, bool pad_to_max_output_size=False) -> (Tensor, Tensor)")


def nms_on_the_host(boxes: torch.Tensor, scores: torch.Tensor, max_output_size: int, iou_threshold: torch.Tensor,
                    scores_threshold: torch.Tensor, pad_to_max_output_size: bool = False) -> tuple[torch.Tensor, ...]:
    """What npu_nms_v4 returns, computed with torchvision's kernel: (selected int32, valid int32 0-D), the valid
    entries first; padded with index 0 (a real row, so a caller that forgets to trim gets wrong answers)."""
    candidates = torch.nonzero(scores > scores_threshold).flatten()
    keep = candidates[_torchvision_nms()(boxes[candidates], scores[candidates], float(iou_threshold))]
    keep = keep[:max_output_size].to(torch.int32)
    valid = torch.tensor(keep.numel(), dtype=torch.int32)
    if pad_to_max_output_size:
        keep = torch.cat([keep, torch.zeros(max_output_size - keep.numel(), dtype=torch.int32)])
    return keep.to(boxes.device), valid.to(boxes.device)


@functools.cache
def npu_nms_v4_op() -> torch._ops.OpOverload:
    """npu_nms_v4 as torch_npu registers it, an op of the `npu` namespace (torch.ops.npu.npu_nms_v4), computed on the
    host: OpCheck sees one NPU kernel, not the host ops inside it. Defined once per process, and only where torch_npu
    is not loaded (it defines the real one)."""
    library = torch.library.Library("npu", "FRAGMENT")
    library.define(NPU_NMS_V4_SCHEMA)
    library.impl("npu_nms_v4", nms_on_the_host, "CPU")
    npu_nms_v4_op.library = library  # the op lives as long as its library
    return torch.ops.npu.npu_nms_v4.default


class HostGradScaler(torch.amp.GradScaler):
    """torch_npu.npu.amp.GradScaler's signature and host syncs, scaling on the CPU. torch_npu's scaler (2.14.0,
    torch_npu/npu/amp/grad_scaler.py) reads a flag with .item() once per (device, dtype) group of gradients in unscale_
    (L260), once in step (L331) and once in update (its growth tracker, L499); torch's generic scaler only in step."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, dynamic: bool = True, enabled: bool = True) -> None:
        super().__init__("cpu", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
        self._dynamic = dynamic  # the real class keeps it private: there is no `dynamic` attribute

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        super().unscale_(optimizer)
        if self._enabled and self._dynamic:
            found = self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
            groups = {(p.grad.device, p.grad.dtype) for group in optimizer.param_groups for p in group["params"]
                      if p.grad is not None}
            for device, _ in sorted(groups, key=str):
                found[device].item()  # torch_npu: `if per_device_found_inf.get(device).item() > 0`

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        growth_tracker = self._growth_tracker
        super().update(new_scale)
        if self._enabled and self._dynamic and new_scale is None and growth_tracker is not None:
            growth_tracker.item()  # torch_npu: `if self._growth_tracker.item() == self._growth_interval`


def host_torch_npu() -> ModuleType:
    """A torch_npu for NpuBackend(torch_npu=...) on the host: the calls the training, validation and NMS paths make
    (the device's calls do nothing, its memory reads 0)."""
    module = ModuleType("torch_npu")
    module.__doc__ = "torch_npu's calls answered on the host (detect/backend/npu_ops/dry_run.py)"
    module.__version__ = "2.14.0"
    op = npu_nms_v4_op()
    module.npu_nms_v4 = lambda boxes, scores, max_output_size, *args, **kwargs: op(boxes, scores, max_output_size,
                                                                                   *args, **kwargs)

    def nothing(*args: object, **kwargs: object) -> None:
        return None

    module.npu = SimpleNamespace(
        set_device=nothing, synchronize=nothing, manual_seed_all=nothing, set_compile_mode=nothing,
        empty_cache=nothing, reset_peak_memory_stats=nothing, set_rng_state=nothing, is_available=lambda: True,
        device_count=lambda: 1, get_device_name=lambda *args: "host (NPU backend run dry)",
        memory_allocated=lambda *args: 0, max_memory_allocated=lambda *args: 0, mem_get_info=lambda *args: (0, 0),
        get_rng_state=lambda *args: torch.get_rng_state(),
        is_bf16_supported=lambda: True, amp=SimpleNamespace(GradScaler=HostGradScaler),
        config=SimpleNamespace(allow_internal_format=False), conv=SimpleNamespace(allow_hf32=True),
        matmul=SimpleNamespace(allow_hf32=False))
    return module


def dry_run_backend(amp_dtype: str | None = "fp16") -> NpuBackend:
    """NpuBackend on the host: its tensors on the CPU, torch_npu's calls answered by host_torch_npu(); fp16 AMP with
    torch_npu's GradScaler by default, as training on a 910B runs (None: fp32)."""
    return NpuBackend(0, device=torch.device("cpu"), torch_npu=host_torch_npu(), amp=amp_dtype is not None,
                      amp_dtype=amp_dtype)
