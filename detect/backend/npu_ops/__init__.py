"""The NPU op manifest's sources as data and the check that reads them: which ops torch_npu 2.14 runs on the NPU
(docs/torch-npu.md, "What runs where"). torch_npu.json and op_plugin.json are made by scripts/npu_op_lists.py."""

from detect.backend.npu_ops.check import FALLBACK_DISABLED, FALLBACK_WARNING, NpuFallbackWarning, OpCheck, OpEvent
from detect.backend.npu_ops.kernels import (
    COMPOSITE,
    HOST,
    MISSING,
    NPU,
    VIEW,
    NpuKernels,
    Verdict,
    npu_kernels,
    op_name,
    qualified,
    verdict,
)

__all__ = ["COMPOSITE", "FALLBACK_DISABLED", "FALLBACK_WARNING", "HOST", "MISSING", "NPU", "VIEW", "NpuFallbackWarning",
           "NpuKernels", "OpCheck", "OpEvent", "Verdict", "npu_kernels", "op_name", "qualified", "verdict"]
