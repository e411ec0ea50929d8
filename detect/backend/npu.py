"""The Ascend NPU backend (torch_npu): fp16 AMP, hccl, npu_nms_v4 on score-padded candidates.

Every torch_npu name used here is checked against the 2.14.0 wheel in docs/torch-npu.md; none was run on hardware.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import io
import logging
import os
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F

from detect.backend.base import AcceleratorBackend, BackendUnavailable
from detect.backend.placement import npu_local_cores
from detect.backend.profiler import ProfileSchedule
from detect.errors import UserError, one_line

LOGGER = logging.getLogger(__name__)

INSTALL_HINT = (
    'install it with pip install "detect-trainer[npu]" plus the Huawei CANN toolkit matching torch_npu 2.14, '
    "then source the toolkit's set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh)"
)
# Candidate counts are padded up to a multiple of this, so npu_nms_v4 sees few shapes
# (docs/torch-npu.md, "NMS on the NPU").
NMS_BUCKET = 1024
# torch_npu's words when ACL_OP_INIT_MODE=2 has turned the legacy acl ops off (libtorch_npu.so, LazyInitAclops and
# the jitCompile option's hook; docs/torch-npu.md, "First hour").
ACL_OPS_DISABLED = ("Acl op is disabled!", "Jit compile set is disabled!")
# npu_nms_v4 drops scores at or below this, which removes the zero-score pad rows. Real scores must be above it:
# callers pass confidence-filtered scores (YOLOv5's smallest conf_thres is 0.001: docs/yolov5.md, "NMS").
NMS_SCORE_FLOOR = 1e-6


def import_torch_npu() -> ModuleType:
    """Import torch_npu, or raise BackendUnavailable (one line) saying what went wrong and what to install."""
    try:
        # registers the "npu" device and the "hccl" process-group backend (docs/torch-npu.md, "Device and imports")
        import torch_npu
    except Exception as error:
        # Any type: a missing package (ImportError), missing CANN libraries (OSError, RuntimeError) or torch_npu's CANN
        # package check, which raises a bare Exception when parts of the toolkit are missing
        # (docs/torch-npu.md, "Device and imports").
        message = f"NPU was asked for but torch_npu cannot be imported ({one_line(error)}); {INSTALL_HINT}"
        raise BackendUnavailable(message) from error
    return torch_npu


class _LogLines(io.TextIOBase):
    """A text stream whose lines go to this module's log at DEBUG."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                LOGGER.debug("torch_npu's GradScaler: %s", line.strip())
        return len(text)


@functools.cache
def logged_scaler(base: type) -> type:
    """torch_npu's GradScaler class `base`, whose print()s go to the log and whose load_state_dict takes any resumable
    state (docs/torch-npu.md, "AMP and the scaler"):
    - it print()s each skipped step and each change of scale (torch_npu/npu/amp/grad_scaler.py L334, L493, L504): a
      dozen lines through the progress bar in the first steps at init_scale 2**16; the epoch's numerics count them;
    - its load_state_dict reads a "dynamic" key (L459) that torch's own GradScaler never writes, so the state of a CPU
      or CUDA last.pt raised KeyError; and it refuses an empty state (L454), which a run without fp16 loss scaling
      (CPU fp32 or bf16) saves."""

    class LoggedGradScaler(base):
        def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
            with contextlib.redirect_stdout(_LogLines()):  # only while torch_npu's code runs, on this thread
                super().unscale_(optimizer)

        def step(self, optimizer: torch.optim.Optimizer, *args, **kwargs):
            with contextlib.redirect_stdout(_LogLines()):
                return super().step(optimizer, *args, **kwargs)

        def update(self, new_scale: float | torch.Tensor | None = None) -> None:
            with contextlib.redirect_stdout(_LogLines()):
                super().update(new_scale)

        def load_state_dict(self, state_dict: dict) -> None:
            if self.is_enabled() and not state_dict:
                LOGGER.info("the checkpoint's run had no fp16 loss scaling: the GradScaler starts at its initial scale")
                return
            # our scalers are dynamic (grad_scaler's defaults); torch's state lacks the key
            super().load_state_dict({"dynamic": getattr(self, "_dynamic", True), **state_dict})

    LoggedGradScaler.__name__ = LoggedGradScaler.__qualname__ = f"Logged{base.__name__}"
    return LoggedGradScaler


def acl_ops_disabled(error: BaseException, what: str, instead: str) -> UserError | None:
    """One line for torch_npu's refusal of a legacy acl op under ACL_OP_INIT_MODE=2 (None for any other error)."""
    if not any(words in str(error) for words in ACL_OPS_DISABLED):
        return None
    mode = os.environ.get("ACL_OP_INIT_MODE")
    setting = f"ACL_OP_INIT_MODE={mode}" if mode is not None else "ACL_OP_INIT_MODE (unset: 2 on this chip)"
    return UserError(f"{what} needs torch_npu's acl ops, which {setting} turns off: unset it or set it to 0 or 1, "
                     f"or {instead}")


def is_available() -> bool:
    """Whether torch_npu imports and sees at least one NPU; imports it only if it is installed."""
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        return bool(import_torch_npu().npu.is_available())
    except Exception as error:  # noqa: BLE001 (a broken CANN install means "no NPU" for auto, not a crash)
        cause = error.__cause__ or error  # the import's own error, not the "NPU was asked for" line
        LOGGER.warning("torch_npu is installed but unusable, so auto does not pick the NPU (%s)", one_line(cause))
        return False


def chip_name(index: int = 0) -> str | None:
    """The chip (SoC) of NPU `index` as CANN names it, e.g. "Ascend910B3": torch_npu's get_device_name is CANN's
    aclrtGetSocName (torch_npu/npu/__init__.py, csrc/npu/Module.cpp GetDeviceName), the name ATC's --soc_version takes
    and an .om is compiled for (docs/torch-npu.md, "First hour"); None where torch_npu does not import or sees no such
    NPU."""
    if importlib.util.find_spec("torch_npu") is None:
        return None
    try:
        runtime = import_torch_npu().npu
        if not runtime.is_available() or index >= runtime.device_count():
            return None
        return str(runtime.get_device_name(index))
    except Exception as error:  # noqa: BLE001 (a broken install reads as "no NPU here"; the caller says what to give)
        LOGGER.debug("no chip name from torch_npu: %s", one_line(error))
        return None


class NpuBackend(AcceleratorBackend):
    """One Ascend NPU, npu:index. `device` overrides the torch.device and `torch_npu` the package (doctor --ops and the
    tests run it on the host: detect/backend/npu_ops/dry_run.py, tests/npu_standin.py)."""

    name = "npu"
    distributed_backend = "hccl"
    amp_by_default = True
    default_amp_dtype = "fp16"
    # One npu_nms_v4 call per batch: one host sync (the valid count) instead of one per image, and one padded
    # candidate bucket (docs/torch-npu.md, "NMS on the NPU"). Checked on the CPU stand-in only, not on a 910B.
    nms_whole_batch = True

    def __init__(
        self,
        index: int = 0,
        *,
        amp: bool | None = None,
        amp_dtype: str | None = None,
        jit_compile: bool | None = None,
        allow_hf32: bool | None = None,
        device: torch.device | None = None,
        torch_npu: ModuleType | None = None,
    ) -> None:
        # torch_npu: a stand-in for the package (doctor --ops's dry run on the host, the tests' stand-in)
        self.torch_npu = torch_npu or import_torch_npu()
        # the same module as torch.npu; torch.cuda's API (docs/torch-npu.md, "Device and imports")
        self.runtime = self.torch_npu.npu
        if device is None:
            if not self.runtime.is_available():
                message = f"NPU was asked for but torch_npu sees no NPU (check npu-smi info); {INSTALL_HINT}"
                raise BackendUnavailable(message)
            count = self.runtime.device_count()
            if index >= count:
                raise BackendUnavailable(f"npu:{index} was asked for but only {count} NPU(s) are visible")
            device = torch.device("npu", index)
        super().__init__(device, amp=amp, amp_dtype=amp_dtype)
        self._configure(jit_compile, allow_hf32)

    def set_device(self) -> None:
        """Make this NPU current, then check that it supports the AMP dtype asked for."""
        super().set_device()
        # is_bf16_supported() initialises the runtime on the current device, so it is asked only after set_device:
        # asked earlier, every rank would open a context on device 0 (docs/torch-npu.md, "AMP and the scaler").
        if self.amp_dtype == torch.bfloat16 and not self.runtime.is_bf16_supported():
            raise BackendUnavailable("bf16 AMP was asked for but this NPU does not support bf16; use fp16")

    def _configure(self, jit_compile: bool | None, allow_hf32: bool | None) -> None:
        """Apply the NPU options that were given (None keeps torch_npu's default), and keep tensors in plain formats."""
        # Internal (private) formats off, as A2 has it by default since torch_npu 2.8: with them on, gradient
        # clipping's _foreach_norm refused conv gradients on a 910B ("Current operator _foreach_norm do not support
        # internal format", ultralytics #22270; the message is in 2.14.0's libtorch_npu.so with 374 others), so an
        # environment or an older default cannot turn them on under us (docs/torch-npu.md, "What runs where").
        self.runtime.config.allow_internal_format = False
        if jit_compile is not None:
            # 910B (A2) defaults to jit_compile=False (binary mode); keep it unless measured
            # (docs/torch-npu.md, "Compile mode and HF32").
            try:
                self.runtime.set_compile_mode(jit_compile=jit_compile)
            except RuntimeError as error:
                refusal = acl_ops_disabled(error, "--npu-jit-compile", "leave --npu-jit-compile out")
                if refusal is None:
                    raise
                raise refusal from None
        if allow_hf32 is not None:
            # A2 defaults: conv HF32 on, matmul off; False gives strict FP32 parity with CPU/GPU
            # (docs/torch-npu.md, "Compile mode and HF32").
            self.runtime.conv.allow_hf32 = allow_hf32
            self.runtime.matmul.allow_hf32 = allow_hf32

    def local_cores(self, index: int) -> set[int] | None:
        return npu_local_cores(index)

    def nms_arguments(self) -> dict:
        # Candidate indices found on the device (nonzero), never through numpy: the branch an NPU tensor takes, kept
        # when the backend runs on the host (doctor --ops, the stand-in).
        return super().nms_arguments() if self.nms_on_host else {**super().nms_arguments(), "numpy_where": False}

    def onnx_provider(self) -> tuple[str, dict, str]:
        # onnxruntime's CANN execution provider, built into the onnxruntime-cann wheel (not in the plain one).
        return "CANNExecutionProvider", {"device_id": self.device.index or 0}, "onnxruntime-cann"

    def offline_model_device(self) -> int:
        return self.device.index or 0

    def _fp16_scaler(self, **settings: float) -> torch.amp.GradScaler:
        # torch_npu's own scaler, dynamic by default (docs/torch-npu.md, "AMP and the scaler"), its prints logged;
        # torch.amp.GradScaler("npu") is unverified.
        return logged_scaler(self.runtime.amp.GradScaler)(**settings)

    def profiler(self, trace_dir: Path, schedule: ProfileSchedule) -> contextlib.AbstractContextManager:
        """torch_npu's profiler (docs/torch-npu.md, "Profiler"): host and NPU activity, Level1 with AI Core pipe
        utilisation; it writes <trace_dir>/<worker>_<time>_ascend_pt/ASCEND_PROFILER_OUTPUT/ (trace_view.json and
        CSVs)."""
        profiler = importlib.import_module("torch_npu.profiler")  # a subpackage: imported, not assumed loaded
        # the real, underscored name torch_npu exports (docs/torch-npu.md, "Profiler")
        settings = profiler._ExperimentalConfig(
            profiler_level=profiler.ProfilerLevel.Level1, aic_metrics=profiler.AiCMetrics.PipeUtilization,
            export_type=profiler.ExportType.Text)
        return profiler.profile(
            activities=[profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.NPU],
            # torch_npu's schedule takes (wait, active, warmup, ...) in that order: keywords only
            # (docs/torch-npu.md, "Profiler").
            schedule=profiler.schedule(wait=schedule.wait, warmup=schedule.warmup, active=schedule.active, repeat=1),
            on_trace_ready=profiler.tensorboard_trace_handler(str(trace_dir)),
            record_shapes=True, experimental_config=settings)

    def nms(self, boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
        """Indices (int64, decreasing score) kept by NMS of (N, 4) xyxy boxes with (N,) scores > NMS_SCORE_FLOOR."""
        count = boxes.shape[0]
        if count == 0:
            return torch.empty(0, dtype=torch.long, device=boxes.device)  # no kernel launch for nothing
        bucket = -(-count // NMS_BUCKET) * NMS_BUCKET  # also max_output_size, so the op's attributes are bucketed too
        # Padded on the device (the port pads on the host); a pad is one cheap op and saves two copies.
        padded_boxes = F.pad(boxes.float(), (0, 0, 0, bucket - count))  # zero boxes have zero area: IoU 0
        padded_scores = F.pad(scores.float(), (0, bucket - count))  # zero scores sort last, below the floor
        # Both thresholds must be 0-D device tensors, not Python floats (docs/torch-npu.md, "NMS on the NPU").
        iou = torch.tensor(iou_threshold, dtype=torch.float32, device=boxes.device)
        floor = torch.tensor(NMS_SCORE_FLOOR, dtype=torch.float32, device=boxes.device)
        # npu_nms_v4 is deprecated in torch_npu 2.14 (it warns once) yet is the NMS op documented for 910B
        # (docs/torch-npu.md, "NMS on the NPU"); it is called only here, so a successor can replace it in this one
        # method.
        try:
            selected, valid = self.torch_npu.npu_nms_v4(
                padded_boxes, padded_scores, bucket, iou, floor, pad_to_max_output_size=True
            )  # fixed-length output (bucket), valid entries first
        except RuntimeError as error:  # npu_nms_v4 has only an acl_op kernel (docs/torch-npu.md, "NMS on the NPU")
            refusal = acl_ops_disabled(error, "NMS on the NPU (npu_nms_v4)", "run NMS on the host: --nms-device cpu")
            if refusal is None:
                raise
            raise refusal from None
        keep = selected[: int(valid)].long()  # int(): one host sync, as in the port's valid.cpu()
        return keep[keep < count]  # belt and braces: a pad row never survives, whatever the op's threshold rule
