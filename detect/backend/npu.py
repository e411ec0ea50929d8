"""The Ascend NPU backend (torch_npu): fp16 AMP, hccl, npu_nms_v4 on score-padded candidates.

Every torch_npu name used here is checked against the 2.14.0 wheel in docs/NPU.md; none was run on hardware.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from detect.backend.base import AcceleratorBackend, BackendUnavailable, scaler_kwargs

if TYPE_CHECKING:
    from detect.config import Hyp

INSTALL_HINT = (
    'install it with pip install "detect-trainer[npu]" plus the Huawei CANN toolkit matching torch_npu 2.14, '
    "then source the toolkit's set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh)"
)
# Candidate counts are padded up to a multiple of this, so npu_nms_v4 sees few shapes (NPU.md §2.4, Huawei v6.0 port).
NMS_BUCKET = 1024
# npu_nms_v4 drops scores at or below this, which removes the zero-score pad rows. Real scores must be above it:
# callers pass confidence-filtered scores (YOLOv5's smallest conf_thres is 0.001, YOLOV5-FACTS.md).
NMS_SCORE_FLOOR = 1e-6


def import_torch_npu() -> ModuleType:
    """Import torch_npu, or raise BackendUnavailable saying what to install."""
    try:
        import torch_npu  # registers the "npu" device and the "hccl" process-group backend (NPU.md §2.1)
    except (ImportError, OSError, RuntimeError) as error:  # OSError/RuntimeError: CANN libraries not found
        message = f"NPU was asked for but torch_npu cannot be imported ({error}); {INSTALL_HINT}"
        raise BackendUnavailable(message) from None
    return torch_npu


def is_available() -> bool:
    """Whether torch_npu imports and sees at least one NPU; imports it only if it is installed."""
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        return bool(import_torch_npu().npu.is_available())
    except Exception:  # a broken CANN install means "no NPU" for auto-selection, not a crash
        return False


class NpuBackend(AcceleratorBackend):
    """One Ascend NPU, npu:index. `device` overrides the torch.device (tests put a CPU stand-in behind it)."""

    name = "npu"
    distributed_backend = "hccl"
    amp_by_default = True
    default_amp_dtype = "fp16"

    def __init__(
        self,
        index: int = 0,
        *,
        amp: bool | None = None,
        amp_dtype: str | None = None,
        jit_compile: bool | None = None,
        allow_hf32: bool | None = None,
        device: torch.device | None = None,
    ) -> None:
        self.torch_npu = import_torch_npu()
        self.runtime = self.torch_npu.npu  # the same module as torch.npu; torch.cuda's API (NPU.md §2.1, §1 #9)
        if device is None:
            if not self.runtime.is_available():
                message = f"NPU was asked for but torch_npu sees no NPU (check npu-smi info); {INSTALL_HINT}"
                raise BackendUnavailable(message)
            count = self.runtime.device_count()
            if index >= count:
                raise BackendUnavailable(f"npu:{index} was asked for but only {count} NPU(s) are visible")
            device = torch.device("npu", index)
        super().__init__(device, amp=amp, amp_dtype=amp_dtype)
        if self.amp_dtype == torch.bfloat16 and not self.runtime.is_bf16_supported():
            raise BackendUnavailable("bf16 AMP was asked for but this NPU does not support bf16; use fp16")
        self._configure(jit_compile, allow_hf32)

    def _configure(self, jit_compile: bool | None, allow_hf32: bool | None) -> None:
        """Apply the NPU options that were given; None keeps torch_npu's default."""
        if jit_compile is not None:
            # 910B (A2) defaults to jit_compile=False (binary mode); keep it unless measured (NPU.md §1 #5, §2.5).
            self.runtime.set_compile_mode(jit_compile=jit_compile)
        if allow_hf32 is not None:
            # A2 defaults: conv HF32 on, matmul off; False gives strict FP32 parity with CPU/GPU (NPU.md §2.1).
            self.runtime.conv.allow_hf32 = allow_hf32
            self.runtime.matmul.allow_hf32 = allow_hf32

    def _fp16_scaler(self, hyp: Hyp) -> torch.amp.GradScaler:
        # torch_npu's own scaler, dynamic by default (NPU.md §1 #3, §2.2); torch.amp.GradScaler("npu") is unverified.
        return self.runtime.amp.GradScaler(**scaler_kwargs(hyp))

    def nms(self, boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
        """Indices (int64, decreasing score) kept by NMS of (N, 4) xyxy boxes with (N,) scores > NMS_SCORE_FLOOR."""
        count = boxes.shape[0]
        if count == 0:
            return torch.empty(0, dtype=torch.long, device=boxes.device)  # no kernel launch for nothing
        bucket = -(-count // NMS_BUCKET) * NMS_BUCKET  # also max_output_size, so the op's attributes are bucketed too
        # Padded on the device (the port pads on the host); a pad is one cheap op and saves two copies.
        padded_boxes = F.pad(boxes.float(), (0, 0, 0, bucket - count))  # zero boxes have zero area: IoU 0
        padded_scores = F.pad(scores.float(), (0, bucket - count))  # zero scores sort last, below the floor
        # Both thresholds must be 0-D device tensors, not Python floats (NPU.md §1.1).
        iou = torch.tensor(iou_threshold, dtype=torch.float32, device=boxes.device)
        floor = torch.tensor(NMS_SCORE_FLOOR, dtype=torch.float32, device=boxes.device)
        selected, valid = self.torch_npu.npu_nms_v4(
            padded_boxes, padded_scores, bucket, iou, floor, pad_to_max_output_size=True
        )  # fixed-length output (bucket), valid entries first
        keep = selected[: int(valid)].long()  # int(): one host sync, as in the port's valid.cpu()
        return keep[keep < count]  # belt and braces: a pad row never survives, whatever the op's threshold rule
