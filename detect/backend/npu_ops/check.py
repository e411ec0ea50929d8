"""A dispatch mode that sees every op a piece of code runs (below autograd, CompositeImplicitAutograd ops already
decomposed) and treats it as torch_npu 2.14 would on an NPU tensor: an NPU kernel runs, a composite is run through
torch's composite kernel so that the ops it calls are checked in turn, and an op without a kernel gets torch_npu's CPU
fallback (its warning) or, as with TORCH_NPU_FALLBACK_CPU_DISABLE=1, its error (docs/torch-npu.md, "What runs
where"). `python -m detect.doctor --ops` records with it; tests/npu_standin.py enforces with it."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from detect.backend.npu_ops.kernels import (
    COMPOSITE,
    HOST,
    MISSING,
    NPU_KEY,
    NpuKernels,
    Verdict,
    npu_kernels,
    qualified,
    verdict,
)

# What torch_npu 2.14.0 says, assembled from the fragments in its torch_npu/lib/libtorch_npu.so (read with `strings`;
# scripts/npu_op_lists.py checks they are still there): the warning of its CPU fallback (the default) ...
FALLBACK_WARNING = ("CAUTION: The operator '{op}' is not currently supported on the NPU backend and will fall back to "
                    "run on the CPU. This may have performance implications.")
# ... and its error when TORCH_NPU_FALLBACK_CPU_DISABLE=1 (it appends an error code line); `through` is
# "dispatcher backend fallback" for an op without a kernel, "explicit CPU kernel" for a kernel that runs on the CPU.
FALLBACK_DISABLED = ("The operator '{op}' would execute its main computation on CPU through {through}, but CPU "
                     "fallback is disabled by TORCH_NPU_FALLBACK_CPU_DISABLE=1.")
FALLBACKS = ("run", "warn", "raise")  # record only; torch_npu's default; TORCH_NPU_FALLBACK_CPU_DISABLE=1
NPU_KEYSET = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, NPU_KEY))


class NpuFallbackWarning(UserWarning):
    """torch_npu's warning that an op runs on the CPU (a UserWarning, as torch's C++ warnings reach Python)."""


@dataclasses.dataclass(frozen=True)
class OpEvent:
    """One op as the NPU would run it: its name, the verdict, and the composites it was called from (outermost
    first)."""

    op: str
    verdict: Verdict
    via: tuple[str, ...] = ()


class OpCheck(TorchDispatchMode):
    """Use as a context manager. `on_op` sees every op (composites and what they call included); `fallback` says what
    an op without an NPU kernel does: "run" (only recorded), "warn" (torch_npu's default: a warning once per op, then
    the op runs) or "raise" (torch_npu with TORCH_NPU_FALLBACK_CPU_DISABLE=1: a RuntimeError naming the op);
    `kernels`: the lists of the torch_npu release to check against (default: the newest)."""

    def __init__(self, on_op: Callable[[OpEvent], None] | None = None, fallback: str = "run",
                 kernels: NpuKernels | None = None) -> None:
        super().__init__()
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        self.kernels = kernels or npu_kernels()
        self.on_op = on_op
        self.fallback = fallback
        self.warned: set[str] = set()
        self._via: list[str] = []

    def refusal(self, op: str, found: Verdict, args: tuple, kwargs: dict) -> str | None:
        """A reason the NPU refuses this call although it has a kernel (None here; a stand-in adds its own)."""
        return None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        found, name = verdict(func, self.kernels), qualified(func)
        if self.on_op is not None:
            self.on_op(OpEvent(name, found, tuple(self._via)))
        if found.kind == COMPOSITE and name not in self._via:  # (a composite that calls itself runs as it is)
            # The composite kernel is the one an NPU tensor gets: on this torch nothing else is registered for the
            # NPU's key, so redispatching there runs it, and the ops it calls come back through this mode.
            self._via.append(name)
            try:
                with self:
                    return func.redispatch(NPU_KEYSET, *args, **kwargs)
            finally:
                self._via.pop()
        if found.kind in (MISSING, HOST):
            self._fall_back(name, found)
        elif (reason := self.refusal(name, found, args, kwargs)) is not None:
            raise RuntimeError(reason)
        return func(*args, **kwargs)

    def _fall_back(self, name: str, found: Verdict) -> None:
        """torch_npu's answer to an op that would compute on the CPU, under this mode's `fallback`."""
        if self.fallback == "raise":
            through = "explicit CPU kernel" if found.kind == HOST else "dispatcher backend fallback"
            raise RuntimeError(FALLBACK_DISABLED.format(op=name, through=through))
        if self.fallback == "warn" and name not in self.warned:
            self.warned.add(name)
            own = self.kernels.host_warning(name.split("::", 1)[1]) if found.kind == HOST else None
            warnings.warn(own or FALLBACK_WARNING.format(op=name), NpuFallbackWarning, stacklevel=3)
