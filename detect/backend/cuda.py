"""The CUDA backend: fp16 AMP with torch.amp.GradScaler("cuda"), nccl, torch.cuda memory stats."""

from __future__ import annotations

import torch

from detect.backend.base import AcceleratorBackend, BackendUnavailable
from detect.backend.placement import cuda_local_cores


def is_available() -> bool:
    """Whether torch sees at least one CUDA device."""
    return torch.cuda.is_available()


class CudaBackend(AcceleratorBackend):
    """One NVIDIA GPU, cuda:index."""

    name = "cuda"
    distributed_backend = "nccl"
    amp_by_default = True
    default_amp_dtype = "fp16"
    runtime = torch.cuda

    def __init__(self, index: int = 0, *, amp: bool | None = None, amp_dtype: str | None = None) -> None:
        if not torch.cuda.is_available():
            raise BackendUnavailable(
                "CUDA was asked for but torch sees no CUDA device (check the driver, CUDA_VISIBLE_DEVICES and "
                "that torch is a CUDA build); choose cpu or auto instead"
            )
        count = torch.cuda.device_count()
        if index >= count:
            raise BackendUnavailable(f"cuda:{index} was asked for but only {count} CUDA device(s) are visible")
        super().__init__(torch.device("cuda", index), amp=amp, amp_dtype=amp_dtype)

    def _fp16_scaler(self, **settings: float) -> torch.amp.GradScaler:
        return torch.amp.GradScaler("cuda", **settings)

    def local_cores(self, index: int) -> set[int] | None:
        properties = torch.cuda.get_device_properties(index)
        if not hasattr(properties, "pci_bus_id"):
            return None
        bus = f"{getattr(properties, 'pci_domain_id', 0):04x}:{properties.pci_bus_id:02x}:{properties.pci_device_id:02x}.0"
        return cuda_local_cores(bus)

    def onnx_provider(self) -> tuple[str, dict, str]:
        return "CUDAExecutionProvider", {"device_id": self.device.index or 0}, "onnxruntime-gpu"

    def _profiler_activities(self) -> list[torch.profiler.ProfilerActivity]:
        return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
