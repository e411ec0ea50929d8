"""CANN's ACL runtime as the NPU stand-ins share it: one process-wide aclInit, a context per (owner, device) and the
context current on each thread; and pyACL (`import acl`, CANN's python/site-packages) with the two calls detect makes,
`acl.rt.get_context()` -> (context, ret) and `acl.rt.set_context(context)` -> ret.

What the stand-ins do with it follows their sources (docs/torch-npu.md, "First hour"):
- torch_npu's set_device is aclrtSetDevice once per device and thread (it returns early when the thread's cached
  device is already that one: csrc/core/npu/NPUFunctions.cpp, SetDevice), which makes the device's default context
  current; so calling it again does not bring torch_npu's context back once another is current.
- ais_bench's aclruntime calls aclInit again (error 100002, ACL_ERROR_REPEAT_INITIALIZE, printed, then it goes on:
  DeviceManager::InitDevices), creates a context of its own (aclrtCreateContext makes it current on the calling
  thread: DeviceManager::SetDevice) and makes it current again before each copy of a tensor (TensorBuffer::SetContext),
  so after an inference its context, not torch_npu's, is current on that thread (Ascend/tools ais-bench_workload at
  9d6da90f).
- Nothing documents that torch_npu's ops run while another context is current, so torch_npu's stand-in refuses them.
"""

from __future__ import annotations

import threading
from types import ModuleType, SimpleNamespace

REPEAT_INITIALIZE = 100002  # ACL_ERROR_REPEAT_INITIALIZE (CANN's acl_base.h)
CONTEXT_NULL = 107002  # ACL_ERROR_RT_CONTEXT_NULL: no context current on the thread


class AclRuntime:
    """The process's ACL state: initialised or not, the contexts, and the context current on each thread."""

    def __init__(self) -> None:
        self.initialised = False
        self.contexts: dict[tuple[str, int], str] = {}
        self._current = threading.local()

    def init(self) -> int:
        """aclInit: 0 the first time in a process, then 100002."""
        if self.initialised:
            return REPEAT_INITIALIZE
        self.initialised = True
        return 0

    def context(self, owner: str, device: int) -> str:
        """The context `owner` made for `device` (made now if it has none), made current on this thread."""
        context = self.contexts.setdefault((owner, device), f"{owner} context on device {device}")
        self.set_current(context)
        return context

    @property
    def current(self) -> str | None:
        return getattr(self._current, "context", None)

    def set_current(self, context: str | None) -> None:
        self._current.context = context


ACL = AclRuntime()


def reset() -> None:
    """A fresh process's ACL state (each test that installs the stand-ins starts from one)."""
    global ACL
    ACL = AclRuntime()


def runtime() -> AclRuntime:
    return ACL


def make_pyacl() -> ModuleType:
    """pyACL's `acl` module with rt.get_context and rt.set_context over the shared runtime."""
    module = ModuleType("acl")

    def get_context() -> tuple[str | None, int]:
        current = runtime().current
        return current, 0 if current is not None else CONTEXT_NULL

    def set_context(context: str) -> int:
        runtime().set_current(context)
        return 0

    module.rt = SimpleNamespace(get_context=get_context, set_context=set_context)
    return module
