"""The NPU op manifest's sources as data and the check that reads them: which ops each torch_npu release we pin runs on
the NPU (docs/torch-npu.md, "What runs where"); torch_npu_<version>.json and op_plugin_v<line>.json are made by
scripts/npu_op_lists.py."""

from detect.backend.npu_ops.check import FALLBACK_DISABLED, FALLBACK_WARNING, NpuFallbackWarning, OpCheck, OpEvent
from detect.backend.npu_ops.kernels import (
    COMPOSITE,
    HOST,
    MISSING,
    NPU,
    VIEW,
    NpuKernels,
    Verdict,
    chosen_lists,
    installed_version,
    list_versions,
    lists_for,
    npu_kernels,
    op_name,
    qualified,
    verdict,
)

__all__ = ["COMPOSITE", "FALLBACK_DISABLED", "FALLBACK_WARNING", "HOST", "MISSING", "NPU", "VIEW", "NpuFallbackWarning",
           "NpuKernels", "OpCheck", "OpEvent", "Verdict", "chosen_lists", "installed_version", "list_versions", "lists_for", "npu_kernels", "op_name",
           "qualified", "verdict"]
