"""Device backends: the only package that knows cpu, cuda and npu. Build one with select()."""

from __future__ import annotations

import re

from detect.backend.base import Backend, BackendUnavailable, MemoryStats
from detect.backend.cpu import host_memory_stats
from detect.errors import UserError

__all__ = ["SPEC_HELP", "Backend", "BackendUnavailable", "MemoryStats", "host_memory_stats", "parse_spec", "select"]

SPEC_HELP = "auto (npu > cuda > cpu), cpu, cuda, cuda:N, npu or npu:N"
_SPEC = re.compile(r"(auto|cpu|cuda|npu)(?::(\d+))?")


def parse_spec(spec: str) -> tuple[str, int]:
    """Split a device spec into (kind, index); a bad spec is a UserError."""
    match = _SPEC.fullmatch(spec.strip().lower())
    if match is None or (match.group(1) in ("auto", "cpu") and match.group(2) is not None):
        raise UserError(f"device '{spec}' is not valid; expected {SPEC_HELP}")
    return match.group(1), int(match.group(2) or 0)


def select(
    spec: str = "auto",
    *,
    amp: bool | None = None,
    amp_dtype: str | None = None,
    npu_jit_compile: bool | None = None,
    npu_allow_hf32: bool | None = None,
) -> Backend:
    """The backend for `spec`; AMP defaults to fp16 on cuda/npu and off on cpu; npu_* apply to npu only."""
    kind, index = parse_spec(spec)
    # Backend modules are imported here, not at the top, so that importing detect.backend touches no device.
    if kind == "auto":
        from detect.backend import cuda, npu

        kind = "npu" if npu.is_available() else "cuda" if cuda.is_available() else "cpu"
    if kind == "npu":
        from detect.backend.npu import NpuBackend

        return NpuBackend(index, amp=amp, amp_dtype=amp_dtype, jit_compile=npu_jit_compile, allow_hf32=npu_allow_hf32)
    if kind == "cuda":
        from detect.backend.cuda import CudaBackend

        return CudaBackend(index, amp=amp, amp_dtype=amp_dtype)
    from detect.backend.cpu import CpuBackend

    return CpuBackend(amp=amp, amp_dtype=amp_dtype)
