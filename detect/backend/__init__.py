"""Device backends: the only package that knows cpu, cuda and npu. Build one with select()."""

from __future__ import annotations

import dataclasses
import re

from detect.backend.base import Backend, BackendUnavailable, MemoryStats
from detect.backend.cpu import host_memory_stats
from detect.errors import UserError

__all__ = ["NMS_DEVICES", "NMS_DEVICE_HELP", "NPU_ALLOW_HF32_HELP", "NPU_JIT_COMPILE_HELP", "SPEC_HELP", "Backend",
           "BackendUnavailable", "DeviceRequest", "MemoryStats", "ascend_chip", "host_memory_stats", "parse_devices",
           "parse_spec", "select"]

SPEC_HELP = ("auto (npu > cuda > cpu), cpu, cuda, cuda:N, npu, npu:N, or as yolov5 writes it: 0 or 0,1,2,3 "
             "(accelerator indices: the NPUs when torch_npu works, else the CUDA GPUs)")
# The NPU switches select() takes (None keeps torch_npu's default: docs/torch-npu.md, "Compile mode and HF32"), as
# settings fields describe them.
NPU_JIT_COMPILE_HELP = "NPU only: set_compile_mode(jit_compile=...) (910B default: off)"
NPU_ALLOW_HF32_HELP = "NPU only: HF32 in fp32 convolutions and matmuls (910B default: conv on, matmul off)"
NMS_DEVICES = ("device", "cpu")
NMS_DEVICE_HELP = ("where NMS runs: device (with the model: npu_nms_v4 on an Ascend NPU, torchvision's kernel on CUDA) "
                   "or cpu (the decoded rows copied to the host, torchvision's kernel; op-plugin marks npu_nms_v4 "
                   "for deprecation, unmaintained, its accuracy and speed not guaranteed: python -m detect.doctor "
                   "--nms compares the two)")
_SPEC = re.compile(r"(?:(auto|cpu|cuda|npu)(?::(\d+(?:,\d+)*))?|(\d+(?:,\d+)*))")


@dataclasses.dataclass(frozen=True)
class DeviceRequest:
    """What --device asks for: a kind ("accelerator" for yolov5's bare indices, "auto", "cpu", "cuda", "npu") and the
    device indices, one per rank when there are several."""

    kind: str
    indices: tuple[int, ...] = (0,)

    def spec(self, position: int = 0) -> str:
        """The one-device spec of the index at `position` (a rank's LOCAL_RANK), e.g. "npu:3"; the kind of bare
        indices is resolved here (the NPUs when torch_npu works, else CUDA, else a UserError)."""
        if position >= len(self.indices):
            raise UserError(f"--device lists {len(self.indices)} device(s) but this is local rank {position}: give "
                            f"one index per rank of the node")
        kind = accelerator_kind() if self.kind == "accelerator" else self.kind
        return kind if kind in ("auto", "cpu") else f"{kind}:{self.indices[position]}"


def parse_devices(spec: str) -> DeviceRequest:
    """--device as a DeviceRequest; a bad spec is a UserError."""
    text = str(spec).strip().lower()
    match = _SPEC.fullmatch(text)
    if match is None or (match.group(1) in ("auto", "cpu") and match.group(2) is not None):
        raise UserError(f"device '{spec}' is not valid; expected {SPEC_HELP}")
    kind, listed, bare = match.groups()
    numbers = listed or bare
    indices = tuple(int(number) for number in numbers.split(",")) if numbers else (0,)
    if len(set(indices)) != len(indices):
        raise UserError(f"device '{spec}' names a device twice")
    return DeviceRequest(kind or "accelerator", indices)


def parse_spec(spec: str) -> tuple[str, int]:
    """Split a one-device spec into (kind, index); a bad spec is a UserError."""
    request = parse_devices(spec)
    return request.kind, request.indices[0]


def accelerator_kind() -> str:
    """The kind yolov5's bare indices (--device 0) name here: npu when torch_npu works, else cuda; neither is a
    UserError that suggests --device cpu."""
    from detect.backend import cuda, npu

    if npu.is_available():
        return "npu"
    if cuda.is_available():
        return "cuda"
    raise BackendUnavailable("--device with an index names an accelerator, but this machine has neither a working "
                             "NPU (torch_npu) nor a CUDA GPU; use --device cpu")


def ascend_chip(spec: str = "npu:0") -> str | None:
    """The chip (SoC) name of the Ascend NPU `spec` names (its index; npu:0 for any other spec), e.g. "Ascend910B3", or
    None where there is no NPU to ask."""
    request = parse_devices(spec)
    index = request.indices[0] if request.kind in ("npu", "accelerator") else 0
    from detect.backend import npu

    return npu.chip_name(index)


def select(
    spec: str = "auto",
    *,
    amp: bool | None = None,
    amp_dtype: str | None = None,
    npu_jit_compile: bool | None = None,
    npu_allow_hf32: bool | None = None,
    nms_device: str = "device",
) -> Backend:
    """The backend for `spec`; AMP defaults to fp16 on cuda/npu and off on cpu; npu_* apply to npu only; nms_device:
    "device", or "cpu" for NMS on the host (NMS_DEVICE_HELP)."""
    if nms_device not in NMS_DEVICES:
        raise UserError(f"--nms-device {nms_device}: expected one of {', '.join(NMS_DEVICES)}")
    backend = _select(spec, amp, amp_dtype, npu_jit_compile, npu_allow_hf32)
    backend.nms_on_host = nms_device == "cpu"
    return backend


def _select(spec: str, amp: bool | None, amp_dtype: str | None, npu_jit_compile: bool | None,
            npu_allow_hf32: bool | None) -> Backend:
    request = parse_devices(spec)
    if request.kind == "accelerator" or len(request.indices) > 1:  # several devices: this process takes the first
        request = parse_devices(request.spec())
    kind, index = request.kind, request.indices[0]
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
