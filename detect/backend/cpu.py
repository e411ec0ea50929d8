"""The CPU backend: bf16 AMP where it times clearly faster than fp32 on the model (amp_check.amp_speed) or is asked
for, gloo, process RSS as memory; and what the CPU is (model, feature flags) for that timing's cache and the
benchmarks."""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

import torch

from detect.backend.base import Backend, MemoryStats

_CPUINFO = Path("/proc/cpuinfo")
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt parameters, glibc's malloc.h
# The flags a benchmark's figures are read beside: fp32 (avx2, fma, avx512f), INT8 (VNNI, AMX-INT8) and bf16 units. They
# describe; no default is chosen from them (docs/benchmarks.md, "bf16 on the CPU").
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def _cpuinfo_field(name: str) -> str | None:
    """The first `name` field of /proc/cpuinfo (Linux), or None."""
    try:
        for line in _CPUINFO.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        return None
    return None


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (/proc/cpuinfo; none where it does not exist): part of the AMP timing's cache key, and
    what the benchmarks were measured on."""
    return frozenset((_cpuinfo_field("flags") or "").split())


def cpu_model() -> str:
    """The CPU's model name, e.g. "AMD EPYC"."""
    return _cpuinfo_field("model name") or platform.processor() or platform.machine()


def cpu_description() -> str:
    """What a benchmark's figures were measured on: the CPU model, its cores and which SPEED_FLAGS it has, e.g.
    "CPU: AMD EPYC, 2 cores; has avx2 fma avx512f avx512_vnni avx512_bf16; lacks avx_vnni amx_bf16 amx_int8"."""
    flags = cpu_flags()
    has = " ".join(flag for flag in SPEED_FLAGS if flag in flags) or "none"
    lacks = " ".join(flag for flag in SPEED_FLAGS if flag not in flags) or "none"
    return f"CPU: {cpu_model()}, {os.cpu_count()} cores; has {has}; lacks {lacks}"


def _status_kib(field: str) -> int | None:
    """A 'kB' field of /proc/self/status (Linux), or None where there is no /proc."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _max_rss_kib() -> int:
    """Peak RSS from getrusage (KiB on Linux), 0 where the resource module does not exist."""
    try:
        import resource  # Unix only
    except ImportError:
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def keep_freed_memory() -> bool:
    """Ask glibc's malloc never to mmap and never to trim (mallopt); False where the C library has no mallopt."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS, Windows): nothing to tune
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def host_memory_stats() -> MemoryStats:
    """Resident set size of this process now and at its peak (VmRSS / VmHWM), on any backend."""
    current = _status_kib("VmRSS")
    peak = _status_kib("VmHWM")
    if peak is None:
        peak = _max_rss_kib()
    if current is None:
        current = peak
    return MemoryStats(current_bytes=current * 1024, peak_bytes=max(peak, current) * 1024)


class CpuBackend(Backend):
    """Runs everything on the host CPU."""

    name = "cpu"
    distributed_backend = "gloo"
    # fp16 autocast on CPU would need loss scaling and is emulated here
    # (docs/benchmarks.md, "Measuring on shared CPUs"); bf16 needs no scaler.
    default_amp_dtype = "bf16"
    # Whether bf16 is faster depends on the CPU, its load, torch's kernels and the model, not on a flag: training
    # times it on the model (docs/benchmarks.md, "bf16 on the CPU").
    amp_timed = True
    supported_amp_dtypes = (torch.bfloat16,)
    # yolov5n at 320 trains 1.17-1.23x faster with channels_last on this project's CPUs
    # (docs/benchmarks.md, "Measuring on shared CPUs").
    channels_last = True
    # One call per image: torchvision's CPU kernel compares each kept box with every later candidate, so one call
    # over a whole batch is many times slower than a call per image (docs/benchmarks.md, "Figures behind constants").
    nms_whole_batch = False
    # The loss on the matched candidates only: a fifth of the padded loss's time on the CPU, where dynamic shapes
    # cost nothing (docs/usage.md, "Training").
    dynamic_shapes = True

    # Validation during training stays fp32 under bf16 autocast: bf16's mAP was further than 0.002 from fp32's
    # (docs/benchmarks.md, "bf16 on the CPU").
    validates_in_amp = False

    def __init__(self, *, amp: bool | None = None, amp_dtype: str | None = None) -> None:
        super().__init__(torch.device("cpu"), amp=amp, amp_dtype=amp_dtype)

    def device_name(self) -> str:
        return cpu_model()

    @property
    def nms_threads(self) -> int:
        """torch's thread count where its OpenMP threads sleep while they wait (OMP_WAIT_POLICY=PASSIVE, our CLIs'
        default), else 1. torchvision's CPU kernel runs on one thread, so the calls of a batch can share the cores:
        bench_nms at 1 / 8 / 32 images 2.20 / 0.86 / 1.39 ms per image on 2 threads, 2.94 / 1.13 / 2.08 on one; with
        OpenMP's default spinning, its threads hold the cores and 2 threads were slower at 8 images (1.31 ms)."""
        return torch.get_num_threads() if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE" else 1

    def memory_stats(self) -> MemoryStats:
        """Resident set size of this process now and at its peak."""
        return host_memory_stats()

    def prepare_steps(self) -> None:
        """Keep freed memory in the process for the next step or batch (glibc; elsewhere nothing changes).

        glibc serves an allocation above its mmap threshold (32 MB at most) with fresh pages and unmaps them on free,
        so every forward (and backward) page-faults its activations into existence again. Inference, a 16-image batch
        at 640: 160-300k faults and 0.4-0.85 s of kernel time a batch (yolov5n, getrusage); with mmap off and
        trimming out of reach the freed blocks are reused: 0 faults, 0.64 s instead of 0.75-1.13 s a batch
        (scripts/bench_infer.py --batch-size 16). Training yolov5n at 320, batch 16: 17k faults a step before, 1
        after (scripts/bench_train.py prints them).
        """
        keep_freed_memory()

    def reset_peak_memory(self) -> None:
        """Reset the process's peak RSS where the kernel allows it (writing 5 to clear_refs resets VmHWM)."""
        try:
            _CLEAR_REFS.write_text("5")
        except OSError:
            pass  # not Linux, or not permitted: the peak then covers the whole process lifetime
