"""The Backend base class: everything the cpu, cuda and npu backends share."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import platform
import random
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from detect.backend.profiler import ProfileSchedule
from detect.errors import UserError

# Names a user may give for the AMP dtype.
AMP_DTYPES: dict[str, torch.dtype] = {
    "fp16": torch.float16,
    "float16": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
}


@functools.cache
def _torchvision_nms():
    """torchvision's compiled nms without its Python package: `import torchvision` costs seconds (most of them
    torch._dynamo, which its ops import) for one kernel (docs/benchmarks.md, "Inference"). Loading its
    kernel library registers torch.ops.torchvision.nms (what torchvision.ops.nms calls); where that library cannot
    be found or loaded, the package's nms."""
    spec = importlib.util.find_spec("torchvision")
    folder = Path(spec.origin).parent if spec is not None and spec.origin else None
    for library in sorted(folder.glob("_C*")) if folder else ():
        if library.suffix in (".so", ".pyd"):
            try:
                torch.ops.load_library(str(library))
                return torch.ops.torchvision.nms
            except (OSError, RuntimeError, AttributeError):
                continue
    import torchvision

    return torchvision.ops.nms


class BackendUnavailable(UserError):
    """The device that was asked for cannot be used here (missing package, driver or device)."""


@dataclass(frozen=True)
class MemoryStats:
    """Memory in use now and at its peak since the last reset, in bytes."""

    current_bytes: int
    peak_bytes: int


class Backend:
    """One device kind: its torch.device, AMP, RNG, memory, sync and device-side ops."""

    name: ClassVar[str] = ""
    distributed_backend: ClassVar[str] = ""
    amp_by_default: ClassVar[bool] = False
    # Whether training turns AMP on by default only where its step times clearly faster than fp32's on the model
    # (amp_check.amp_speed), instead of by amp_by_default.
    amp_timed: ClassVar[bool] = False
    default_amp_dtype: ClassVar[str] = "fp16"
    supported_amp_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float16, torch.bfloat16)
    # Whether convolutions here run faster on channels_last tensors (measured where True).
    channels_last: ClassVar[bool] = False
    # Whether NMS runs every image of a batch in one kernel call (ops/nms.py, whole_batch), else one call per image.
    nms_whole_batch: ClassVar[bool] = False
    # Whether validation during training runs under the training's autocast (yolov5 validates in fp16 on GPUs).
    validates_in_amp: ClassVar[bool] = True
    # Whether data-dependent shapes cost nothing here (no graph to compile again, no queue that a host sync drains):
    # the training loss then scores the matched candidates only (DetectionLoss.matched_only).
    dynamic_shapes: ClassVar[bool] = False
    # --nms-device cpu: NMS runs on the host (the decoded rows copied there, torchvision's kernel), whatever the device.
    nms_on_host: bool = False

    def __init__(self, device: torch.device, *, amp: bool | None = None, amp_dtype: str | None = None) -> None:
        self.device = device
        self.amp_dtype: torch.dtype | None = self._resolve_amp(amp, amp_dtype)
        self.amp_enabled = self.amp_dtype is not None

    def _resolve_amp(self, amp: bool | None, amp_dtype: str | None) -> torch.dtype | None:
        """The autocast dtype for these options, or None when AMP is off; naming a dtype turns AMP on."""
        if amp_dtype is not None and amp_dtype.lower() not in AMP_DTYPES:
            raise UserError(f"amp_dtype '{amp_dtype}' is not one of {', '.join(AMP_DTYPES)}")
        if amp is False or (amp is None and amp_dtype is None and not self.amp_by_default):
            return None
        dtype = AMP_DTYPES[(amp_dtype or self.default_amp_dtype).lower()]
        if dtype not in self.supported_amp_dtypes:
            names = ", ".join(str(d).removeprefix("torch.") for d in self.supported_amp_dtypes)
            raise UserError(f"AMP dtype {amp_dtype} is not supported on {self.name} (supported: {names})")
        return dtype

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.device}, amp_dtype={self.amp_dtype})"

    # --- device and RNG ---------------------------------------------------------------------------
    def set_device(self) -> None:
        """Make this backend's device the current one for this process (call before allocating)."""

    def seed(self, seed: int) -> None:
        """Seed python random, numpy, torch and the device RNG."""
        random.seed(seed)
        np.random.seed(seed % 2**32)  # numpy accepts 32-bit seeds only
        torch.manual_seed(seed)
        self._seed_device(seed)

    def _seed_device(self, seed: int) -> None:
        """Seed the accelerator's own generators (the cpu has none beyond torch.manual_seed)."""

    def rng_state(self) -> torch.Tensor | None:
        """The device generator's state, for exact resume (None: the cpu has none beyond torch's)."""
        return None

    def set_rng_state(self, state: torch.Tensor | None) -> None:
        """Restore what rng_state() returned."""

    def synchronize(self) -> None:
        """Wait until queued device work has finished."""

    def prepare_steps(self) -> None:
        """Process-wide settings that make repeated steps (training steps, inference batches) faster on this device
        (none by default)."""

    def device_name(self) -> str:
        """The device's model name, e.g. the CPU's "model name" (for benchmark tables)."""
        return platform.processor() or platform.machine()

    # --- memory -----------------------------------------------------------------------------------
    def memory_stats(self) -> MemoryStats:
        """Current and peak memory of this device, in bytes."""
        raise NotImplementedError

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes of this device's memory (AutoBatch)."""
        raise NotImplementedError

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory measurement."""

    def empty_cache(self) -> None:
        """Return cached, unused device memory to the driver."""

    def to_device(self, tensor: torch.Tensor, non_blocking: bool = True) -> torch.Tensor:
        """The tensor on this backend's device (asynchronous from pinned memory when non_blocking)."""
        return tensor.to(self.device, non_blocking=non_blocking)

    # --- AMP --------------------------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """Autocast context for the forward pass and loss; a no-op when AMP is off."""
        if not self.amp_enabled:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def validation_autocast(self) -> contextlib.AbstractContextManager[None]:
        """Autocast for validation during training: the training's where validates_in_amp, else none (fp32)."""
        return self.autocast() if self.validates_in_amp else contextlib.nullcontext()

    @property
    def amp_default_reason(self) -> str:
        """Why AMP is on or off here when neither --amp nor --no-amp is given."""
        return f"AMP is {'on' if self.amp_by_default else 'off'} by default on {self.name}"

    def precision(self) -> str:
        """The training precision in words: "bf16 autocast", "fp16 autocast" or "fp32"."""
        names = {torch.bfloat16: "bf16", torch.float16: "fp16"}
        return f"{names[self.amp_dtype]} autocast" if self.amp_dtype is not None else "fp32"

    def grad_scaler(self, *, init_scale: float, growth_factor: float, growth_interval: int) -> torch.amp.GradScaler:
        """Dynamic loss scaler with these settings; a disabled (no-op) scaler unless AMP is fp16."""
        # torch's GradScaler asserts on these; a bad hyp value is the user's to fix, so say which one.
        if not (init_scale > 0 and growth_factor > 1 and growth_interval >= 1):
            raise UserError(f"AMP scaler settings need init_scale > 0, growth_factor > 1 and growth_interval >= 1; "
                            f"got {init_scale}, {growth_factor}, {growth_interval}")
        if self.amp_dtype != torch.float16:
            # bf16 has fp32's exponent range, so it needs no loss scaling (docs/torch-npu.md, "AMP and the scaler").
            return torch.amp.GradScaler(self.device.type, enabled=False)
        return self._fp16_scaler(init_scale=float(init_scale), growth_factor=float(growth_factor),
                                 growth_interval=int(growth_interval))

    def _fp16_scaler(self, **settings: float) -> torch.amp.GradScaler:
        """The device's dynamic loss scaler for fp16 AMP, built with grad_scaler's settings."""
        raise NotImplementedError

    # --- profiling --------------------------------------------------------------------------------
    def profiler(self, trace_dir: Path, schedule: ProfileSchedule) -> contextlib.AbstractContextManager:
        """A profiler context; call .step() once per training step. It records `schedule`'s active steps and
        writes a Chrome trace (Perfetto, TensorBoard) into trace_dir (detect/backend/profiler.py reads it)."""
        return torch.profiler.profile(
            activities=self._profiler_activities(),
            schedule=torch.profiler.schedule(wait=schedule.wait, warmup=schedule.warmup, active=schedule.active,
                                             repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(trace_dir)),
            record_shapes=True)

    def _profiler_activities(self) -> list[torch.profiler.ProfilerActivity]:
        """What torch.profiler records on this device."""
        return [torch.profiler.ProfilerActivity.CPU]

    # --- ops --------------------------------------------------------------------------------------
    def resize(self, images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        """Bilinear resize of (B, C, H, W) images to size (height, width); integer images come back float32."""
        if not images.is_floating_point():
            # uint8 interpolate is unverified on NPU (docs/torch-npu.md, "Device-side image ops")
            images = images.float()
        return F.interpolate(images, size=tuple(size), mode="bilinear", align_corners=False)

    def nms(self, boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
        """Indices (int64, decreasing score) kept by NMS of (N, 4) xyxy boxes with (N,) scores."""
        return _torchvision_nms()(boxes, scores, iou_threshold)

    @property
    def nms_threads(self) -> int:
        """Threads that NMS kernel calls may run on at once (ops/nms.py); one where the kernel runs on the device."""
        return 1

    def nms_arguments(self) -> dict:
        """This backend's keyword arguments to ops.nms.non_max_suppression: its kernel, whole-batch mode, threads (with
        nms_on_host: torchvision's kernel, a call per image and class group, on one thread)."""
        if self.nms_on_host:
            return {"nms": _torchvision_nms(), "whole_batch": False, "threads": 1}
        return {"nms": self.nms, "whole_batch": self.nms_whole_batch, "threads": self.nms_threads}

    def nms_input(self, prediction: torch.Tensor) -> torch.Tensor:
        """The decoded rows where this backend's NMS runs: on the host with nms_on_host, else where they are."""
        return prediction.cpu() if self.nms_on_host else prediction

    def local_cores(self, index: int) -> set[int] | None:
        """The host cores NUMA-local to this kind's device `index`, where the topology says (placement.py)."""
        return None

    def onnx_provider(self) -> tuple[str, dict, str]:
        """onnxruntime's execution provider for this device, its options, and the package that has it."""
        return "CPUExecutionProvider", {}, "onnxruntime"

    def offline_model_device(self) -> int:
        """The device id an Ascend offline model (.om) runs on; a UserError where this is no Ascend device."""
        raise UserError(f"an Ascend .om runs on an Ascend NPU only (this is {self.device}): --device npu or npu:N")


class AcceleratorBackend(Backend):
    """A device whose runtime module follows torch.cuda's API (torch.cuda itself, torch_npu.npu)."""

    runtime: ModuleType

    def set_device(self) -> None:
        """Make this device current, so that stray allocations and the process group land on it."""
        self.runtime.set_device(self.device)

    def rng_state(self) -> torch.Tensor:
        """This device's generator state."""
        return self.runtime.get_rng_state(self.device)

    def set_rng_state(self, state: torch.Tensor | None) -> None:
        """Restore this device's generator state."""
        if state is not None:
            self.runtime.set_rng_state(state, self.device)

    def _seed_device(self, seed: int) -> None:
        self.runtime.manual_seed_all(seed)

    def synchronize(self) -> None:
        """Wait for this device's queued work."""
        self.runtime.synchronize()

    def device_name(self) -> str:
        """The device's model name as its runtime reports it."""
        return str(self.runtime.get_device_name(self.device.index or 0))

    def memory_stats(self) -> MemoryStats:
        """Bytes held by tensors on this device now and at peak (the caching allocator's view)."""
        return MemoryStats(
            current_bytes=int(self.runtime.memory_allocated(self.device)),
            peak_bytes=int(self.runtime.max_memory_allocated(self.device)),
        )

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes of this device's memory, as its driver reports them (torch_npu 2.14.0 has
        mem_get_info in torch_npu/npu/__init__.py, read in the wheel)."""
        free, total = self.runtime.mem_get_info(self.device)
        return int(free), int(total)

    def reset_peak_memory(self) -> None:
        """Start a new peak measurement on this device."""
        self.runtime.reset_peak_memory_stats(self.device)

    def empty_cache(self) -> None:
        """Release the caching allocator's unused blocks."""
        self.runtime.empty_cache()
