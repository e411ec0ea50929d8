"""torch_npu.npu.amp.GradScaler on the CPU, following what the 2.14.0 wheel's torch_npu/npu/amp/grad_scaler.py does
where it matters to detect (read in the wheel, `pip download --no-deps torch-npu==2.14.0`; docs/torch-npu.md, "AMP and
the scaler"):
- it print()s "Gradient overflow. Skipping step" on each skipped step (`_maybe_opt_step`, L334) and "Loss scaler
  reducing loss scale to X" / "... increasing ..." on each change of scale (`_npu_update_scale`, L493, L504);
- its state_dict() adds a "dynamic" key (L447) that its load_state_dict() reads unconditionally (L459: a KeyError for
  the state of torch's own GradScaler, as a CPU or CUDA last.pt holds), and an empty state is refused (L454);
- an overflow is decided per rank in INF_NAN mode (`torch_npu.npu.utils.is_support_inf_nan()`, the 910B's default):
  `_sync_dist_overflow_count` returns early (L476-L477) instead of all-reducing the overflow count as it does in
  saturation mode, where an overflow leaves the gradients finite (saturated) and only the float status tells.
It keeps HostGradScaler's host syncs (one .item() in unscale_, step and update each when nothing overflows).
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.amp.grad_scaler import GradScaler as TorchGradScaler

from detect.backend.npu_ops.dry_run import HostGradScaler

FP16_MAX = 65504.0  # where saturation mode clamps an overflow


def inf_nan_mode() -> bool:
    """What the installed torch_npu stand-in's npu.utils.is_support_inf_nan() answers."""
    return sys.modules["torch_npu"].npu.utils.is_support_inf_nan()


class GradScaler(HostGradScaler):
    """torch_npu's GradScaler where detect meets it (the module's docstring)."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, dynamic: bool = True, enabled: bool = True) -> None:
        super().__init__(init_scale, growth_factor, backoff_factor, growth_interval, dynamic, enabled)
        self._has_overflow = False

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        TorchGradScaler.unscale_(self, optimizer)
        if not (self._enabled and self._dynamic):
            return
        found = self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        for device in sorted(found, key=str):
            if found[device].item() > 0:  # torch_npu: `if per_device_found_inf.get(device).item() > 0`
                self._has_overflow = True
        if not inf_nan_mode():  # saturation: the gradients hold the largest finite value, the float status the rest
            for group in optimizer.param_groups:
                for parameter in group["params"]:
                    if parameter.grad is not None:
                        parameter.grad.nan_to_num_(nan=FP16_MAX, posinf=FP16_MAX, neginf=-FP16_MAX)
        self._sync_dist_overflow_count()
        if self._has_overflow:
            for flag in found.values():
                flag.fill_(1.0)

    def _sync_dist_overflow_count(self) -> None:
        if inf_nan_mode():
            return  # torch_npu 2.14.0 L476-L477: no all-reduce; each rank decides alone
        if self._dynamic and dist.is_initialized():
            count = torch.tensor([1.0 if self._has_overflow else 0.0])
            dist.all_reduce(count)
            self._has_overflow = bool(count.item() != 0)

    def _maybe_opt_step(self, optimizer: torch.optim.Optimizer, optimizer_state: dict, *args, **kwargs):
        if not sum(value.item() for value in optimizer_state["found_inf_per_device"].values()) \
                and not self._has_overflow:
            return optimizer.step(*args, **kwargs)
        print("Gradient overflow. Skipping step")
        return None

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        dynamic, overflow = self._enabled and self._dynamic and new_scale is None, self._has_overflow
        TorchGradScaler.update(self, new_scale)
        if dynamic:
            if overflow:
                print(f"Loss scaler reducing loss scale to {self._scale.item()}")
            elif self._growth_tracker.item() == 0:  # the one sync of a normal step: 0 again after a growth
                print(f"Loss scaler increasing loss scale to {self._scale.item()}")
        self._has_overflow = False

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self._enabled:
            state["dynamic"] = self._dynamic
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled instance "
                               "of GradScaler.")
        super().load_state_dict(state_dict)
        self._dynamic = state_dict["dynamic"]
