"""A CPU stand-in for the few torch_npu names detect.backend.npu calls, enforcing their documented contracts.

Tests built on it are contract tests of our glue against a CPU stand-in, not the hardware. The contracts
come from docs/torch-npu.md (checked against the torch_npu 2.14.0 sources); nothing here was run on an NPU.
The stand-in enforces torch_npu's rules only: our own rules (such as padding NMS candidates to buckets of
1024) are checked by our tests, so that a stand-in stricter than the real package cannot hide a bug.

Use it with pytest's monkeypatch fixture, which undoes the sys.modules change after the test:

    from tests.npu_standin import npu_backend

    def test_something(monkeypatch):
        backend = npu_backend(monkeypatch, amp=True)   # an NpuBackend whose tensors live on the CPU
        backend.torch_npu.calls                         # (name, args, kwargs) of each stand-in call

It also does what torch_npu 2.14 does for an op it has no NPU kernel for: from install() to the end of the test
(tests/conftest.py leaves it), every op runs under detect.backend.npu_ops.OpCheck, which looks each one up in the
manifest's sources (the wheel's registrations, op-plugin's v2.14 entries, torch's composites, whose calls are checked
in turn). By default it raises torch_npu's error, as a 910B does with TORCH_NPU_FALLBACK_CPU_DISABLE=1, so that a test
fails the day an op without a kernel enters an NPU path; `fallback="warn"` gives torch_npu's default (its warning,
then the op runs on the CPU). The stand-in's tensors live on the CPU, so it cannot tell a host op from a device op:
it checks every op the test runs while it is installed, host ones included (they are all NPU-covered today).
"""

from __future__ import annotations

import contextlib
import enum
import importlib.machinery
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import _disable_current_modes

from detect.backend.npu import NpuBackend
from detect.backend.npu_ops import OpCheck, Verdict, npu_kernels
from detect.backend.npu_ops.dry_run import nms_on_the_host, npu_nms_v4_op
from tests import acl_standin
from tests.npu_scaler_standin import GradScaler

# The op check of each install() in this process that is still active, innermost last (tests/conftest.py leaves them).
ACTIVE_CHECKS: list[OpCheck] = []


def _require(condition: bool, message: str) -> None:
    """Raise AssertionError (even under python -O) when a documented contract is broken."""
    if not condition:
        raise AssertionError(f"torch_npu stand-in: {message}")


def npu_nms_v4(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    max_output_size: int,
    iou_threshold: torch.Tensor,
    scores_threshold: torch.Tensor,
    pad_to_max_output_size: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """npu_nms_v4 on the CPU: (selected int32 [M], valid int32 0-D), valid entries first
    (docs/torch-npu.md, "NMS on the NPU")."""
    _check_nms_contract(boxes, scores, max_output_size, iou_threshold, scores_threshold)
    return nms_on_the_host(boxes, scores, max_output_size, iou_threshold, scores_threshold, pad_to_max_output_size)


def _check_nms_contract(boxes: torch.Tensor, scores: torch.Tensor, max_output_size: int, iou_threshold: torch.Tensor,
                        scores_threshold: torch.Tensor) -> None:
    """npu_nms_v4's documented contract (docs/torch-npu.md, "NMS on the NPU")."""
    _require(boxes.dtype == torch.float32 and scores.dtype == torch.float32, "boxes and scores must be float32")
    _require(boxes.dim() == 2 and boxes.shape[1] == 4, f"boxes must be (N, 4), got {tuple(boxes.shape)}")
    _require(scores.shape == (boxes.shape[0],), f"scores must be (N,), got {tuple(scores.shape)}")
    for name, value in (("iou_threshold", iou_threshold), ("scores_threshold", scores_threshold)):
        _require(isinstance(value, torch.Tensor) and value.dim() == 0, f"{name} must be a 0-D tensor, got {value!r}")
        _require(value.device == boxes.device, f"{name} must be on the boxes' device")
    _require(isinstance(max_output_size, int) and max_output_size > 0, "max_output_size must be a positive int")


# torch_npu 2.14.0's refusal of an acl op under ACL_OP_INIT_MODE=2 (csrc/framework/LazyInitAclops.cpp, LazyInitAclops;
# the message and its error-code line as NPUException.cpp's formatErrorCode writes them).
ACL_OPS_OFF = ("Acl op is disabled! Please check the environment variable ACL_OP_INIT_MODE.\n[ERROR] 2026-12-07-10:00:00 "
               "(PID:1, Device:0, RankID:-1) ERR00007 PTA feature not supported")
JIT_OFF = ("Jit compile set is disabled! If you want to set, please change the environment variable ACL_OP_INIT_MODE to "
           "0 or 1.\n[ERROR] 2026-12-07-10:00:00 (PID:1, Device:0, RankID:-1) ERR00007 PTA feature not supported")


def acl_op_init_mode() -> int:
    """ACL_OP_INIT_MODE as torch_npu reads it (OptionsManager::GetAclOpInitMode): 0, 1 or 2 from the environment, else
    the default, 1 on a 910B with CANN 8.3.RC1 or newer."""
    value = os.environ.get("ACL_OP_INIT_MODE", "")
    return int(value) if value in ("0", "1", "2") else 1


class StandinOpCheck(OpCheck):
    """OpCheck, plus the refusal of an op that torch_npu's library says takes no tensor in an internal format
    ("Current operator _foreach_norm do not support internal format.": ultralytics #22270 on a 910B, gradient clipping)
    while the stand-in's `npu.config.allow_internal_format` is on."""

    def __init__(self, module: ModuleType, fallback: str) -> None:
        super().__init__(fallback=fallback)
        self.module = module

    def refusal(self, op: str, found: Verdict, args: tuple, kwargs: dict) -> str | None:
        name = op.split("::", 1)[1]
        base = name.split(".", 1)[0]
        if self.module.npu.config.allow_internal_format and base in npu_kernels().refuse_internal_format:
            return f"Current operator {base} do not support internal format. "  # torch_npu's words
        if self.module.acl_op_init_mode == 2 and self.kernels.acl_op_only(name):
            return ACL_OPS_OFF  # an op with only a legacy acl_op kernel (op-plugin) under ACL_OP_INIT_MODE=2
        own = self.module.thread_context()
        if own is not None and acl_standin.runtime().current != own:
            return (f"torch_npu stand-in: {op} ran while {acl_standin.runtime().current} is current on this thread, "
                    f"not torch_npu's ({own}); nothing documents that torch_npu's ops run then (tests/acl_standin.py)")
        return None


class NpuConfig:
    """torch_npu.npu.config: only allow_internal_format means something (torch_npu/npu/npu_config.py, _npuConfig);
    off by default on A2 since torch_npu 2.8 (docs/torch-npu.md, "Compile mode and HF32")."""

    def __init__(self, calls: list) -> None:
        self._calls = calls
        object.__setattr__(self, "allow_internal_format", False)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_"):
            self._calls.append(("config." + name, (value,), {}))
        super().__setattr__(name, value)




class Hf32Flag:
    """torch_npu.npu.conv / .matmul: an allow_hf32 property whose setter rejects non-bools
    (docs/torch-npu.md, "Compile mode and HF32")."""

    def __init__(self, default: bool) -> None:
        self._allow_hf32 = default

    @property
    def allow_hf32(self) -> bool:
        return self._allow_hf32

    @allow_hf32.setter
    def allow_hf32(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"allow_hf32 must be a bool, but got {type(value).__name__}")  # torch_npu's words
        self._allow_hf32 = value


class ProfilerActivity(enum.Enum):
    """torch_npu.profiler.ProfilerActivity (compiled, torch_npu._C._profiler): CPU and NPU
    (docs/torch-npu.md, "Profiler")."""

    CPU = 0
    NPU = 1


class ExperimentalConfig:
    """torch_npu.profiler._ExperimentalConfig's signature (profiler/experimental_config.py, 2.14.0)."""

    def __init__(self, profiler_level: str = "Level0", aic_metrics: str = "ACL_AICORE_PIPE_UTILIZATION",
                 l2_cache: bool = False, msprof_tx: bool = False, mstx: bool = False, data_simplification: bool = True,
                 record_op_args: bool = False, op_attr: bool = False, gc_detect_threshold: float | None = None,
                 export_type: str | list = "text", host_sys: list | None = None,
                 mstx_domain_include: list | None = None, mstx_domain_exclude: list | None = None,
                 sys_io: bool = False, sys_interconnection: bool = False) -> None:
        self.profiler_level, self.aic_metrics, self.export_type = profiler_level, aic_metrics, export_type


class Schedule:
    """torch_npu.profiler.schedule: note the positional order (wait, active, warmup, ...), unlike torch's."""

    def __init__(self, wait: int, active: int, warmup: int = 0, repeat: int = 0, skip_first: int = 0,
                 skip_first_wait: int = 0) -> None:
        self.wait, self.active, self.warmup, self.repeat, self.skip_first = wait, active, warmup, repeat, skip_first


class TraceHandler:
    """What tensorboard_trace_handler returns: at trace-ready it writes the layout torch_npu writes,
    <dir>/<worker>_<time>_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json, a bare list of events whose torch ranges
    are all cpu_op and whose ts is a string (torch_npu 2.14.0: _profiler_path_creator.py, _trace_event_manager.py)."""

    def __init__(self, dir_name: str | None = None, worker_name: str | None = None, analyse_flag: bool = True,
                 async_mode: bool = False) -> None:
        self.folder = Path(dir_name or ".")
        self.worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"

    def __call__(self, profile: torch.profiler.profile) -> None:
        output = self.folder / f"{self.worker}_{time.strftime('%Y%m%d%H%M%S')}000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        output.mkdir(parents=True)
        profile.export_chrome_trace(str(output / "torch.json"))
        events = json.loads((output / "torch.json").read_text())["traceEvents"]
        (output / "torch.json").unlink()
        converted = [{**event, "cat": "cpu_op", "ts": str(event["ts"])} for event in events
                     if event.get("ph") == "X" and event.get("cat") in ("cpu_op", "user_annotation")]
        (output / "trace_view.json").write_text(json.dumps(converted))


def profile(*, activities: list | None = None, schedule: Schedule | None = None,
            on_trace_ready: TraceHandler | None = None, record_shapes: bool = False, profile_memory: bool = False,
            with_stack: bool = False, with_flops: bool = False, with_modules: bool = False,
            experimental_config: ExperimentalConfig | None = None, execution_trace_observer: Any = None,
            custom_trace_id_callback: Any = None, use_cuda: bool | None = None) -> torch.profiler.profile:
    """torch_npu.profiler.profile's keyword-only signature; records host activity with torch's profiler."""
    _require(all(isinstance(activity, ProfilerActivity) for activity in activities or []),
             "activities must be torch_npu.profiler.ProfilerActivity members")
    _require(isinstance(schedule, Schedule), "schedule must come from torch_npu.profiler.schedule")
    _require(isinstance(on_trace_ready, TraceHandler), "on_trace_ready must be torch_npu's tensorboard_trace_handler")
    _require(experimental_config is None or isinstance(experimental_config, ExperimentalConfig),
             "experimental_config must be a torch_npu.profiler._ExperimentalConfig")
    return torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=schedule.wait, warmup=schedule.warmup, active=schedule.active,
                                         repeat=schedule.repeat, skip_first=schedule.skip_first),
        on_trace_ready=on_trace_ready, record_shapes=record_shapes)


def _index(device: Any) -> int:
    """A device's index as torch_npu takes one: an int, or a torch.device ("npu:3"; no index: 0)."""
    return device.index or 0 if isinstance(device, torch.device) else int(device or 0)


class Devices:
    """torch_npu.npu's device calls: set_device (aclrtSetDevice once per thread and device: SetDevice returns early for
    the thread's cached device, csrc/core/npu/NPUFunctions.cpp, so it does not make its context current again) and
    get_device_name (CANN's aclrtGetSocName: the chip, as ATC's --soc_version names it; csrc/npu/Module.cpp
    GetDeviceName; an index out of range is an AssertionError, torch_npu/npu/__init__.py). A fresh one starts a
    fresh process's ACL state (tests/acl_standin.py)."""

    def __init__(self, module: ModuleType, calls: list, count: int) -> None:
        self.module, self.calls, self.count = module, calls, count
        self.local = threading.local()  # torch_npu's thread_local `local_device`
        acl_standin.reset()

    def set_device(self, device: Any) -> None:
        self.calls.append(("set_device", (device,), {}))
        index = _index(device)
        if getattr(self.local, "device", None) == index:
            return
        acl_standin.runtime().init()
        acl_standin.runtime().context("torch_npu", index)  # the device's default context, current on this thread
        self.local.device = index

    def thread_context(self) -> str | None:
        """torch_npu's context of this thread's device, None before set_device on this thread."""
        index = getattr(self.local, "device", None)
        return None if index is None else acl_standin.runtime().contexts[("torch_npu", index)]

    def get_device_name(self, device: Any = None) -> str:
        if not 0 <= _index(device) < self.count:
            raise AssertionError("Invalid device id")
        self.calls.append(("get_device_name", (device,), {}))
        return self.module.chip


def make_torch_npu(device_count: int = 1, chip: str = "Ascend910B3") -> ModuleType:
    """A fresh fake torch_npu that sees `device_count` NPUs of SoC `chip` (`module.chip`, a test may change it);
    `.calls` records (name, args, kwargs) of each npu.* call and of npu_nms_v4."""
    calls: list[tuple[Any, ...]] = []
    module = ModuleType("torch_npu")
    module.__doc__ = "CPU stand-in for torch_npu (tests/npu_standin.py)"
    module.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)  # importlib.util.find_spec reads it

    def record(name: str, result: Any = None) -> Any:
        def function(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, args, kwargs))
            return result
        return function

    def nms(boxes: torch.Tensor, scores: torch.Tensor, max_output_size: int, iou_threshold: torch.Tensor,
            scores_threshold: torch.Tensor, **kwargs: Any) -> Any:
        calls.append(("npu_nms_v4", (boxes.shape[0], max_output_size), kwargs))
        _check_nms_contract(boxes, scores, max_output_size, iou_threshold, scores_threshold)
        return npu_nms_v4_op()(boxes, scores, max_output_size, iou_threshold, scores_threshold, **kwargs)

    devices = Devices(module, calls, device_count)

    def is_bf16_supported() -> bool:
        # It initialises the runtime on the current device, so it belongs after set_device
        # (docs/torch-npu.md, "AMP and the scaler").
        _require("set_device" in [call[0] for call in calls], "is_bf16_supported() called before set_device()")
        calls.append(("is_bf16_supported", (), {}))
        return module.bf16_supported

    module.__version__ = "2.14.0"  # torch_npu/__init__.py re-exports torch_npu.version.__version__
    module.npu_nms_v4 = nms
    module.chip = chip
    module.thread_context = devices.thread_context
    module.bf16_supported = True  # what is_bf16_supported() answers; a test may set False
    module.inf_nan = True  # what npu.utils.is_support_inf_nan() answers: the 910B's INF_NAN mode; False: saturation
    module.acl_op_init_mode = acl_op_init_mode()  # 2: the ops with only an acl_op kernel refuse to run

    def set_compile_mode(jit_compile: bool) -> None:
        calls.append(("set_compile_mode", (), {"jit_compile": jit_compile}))
        # the jitCompile option's hook refuses a change from the 910B's default (off) in mode 2
        _require(isinstance(jit_compile, bool), "jit_compile must be a bool")
        if module.acl_op_init_mode == 2 and jit_compile:
            raise RuntimeError(JIT_OFF)

    module.npu = SimpleNamespace(
        is_available=record("is_available", True),
        device_count=record("device_count", device_count),
        get_device_name=devices.get_device_name,
        is_bf16_supported=is_bf16_supported,
        set_device=devices.set_device,
        set_compile_mode=set_compile_mode,
        manual_seed_all=record("manual_seed_all"),
        get_rng_state=record("get_rng_state", torch.arange(8, dtype=torch.uint8)),
        set_rng_state=record("set_rng_state"),
        synchronize=record("synchronize"),
        empty_cache=record("empty_cache"),
        memory_allocated=record("memory_allocated", 1000),
        max_memory_allocated=record("max_memory_allocated", 2000),
        mem_get_info=record("mem_get_info", (30 * 2**30, 64 * 2**30)),  # (free, total): torch_npu/npu/__init__.py
        reset_peak_memory_stats=record("reset_peak_memory_stats"),
        # 910B (A2) defaults: conv HF32 on, matmul HF32 off (docs/torch-npu.md, "Compile mode and HF32").
        conv=Hf32Flag(True),
        matmul=Hf32Flag(False),
        amp=SimpleNamespace(GradScaler=GradScaler),  # tests/npu_scaler_standin.py
        utils=SimpleNamespace(is_support_inf_nan=lambda: module.inf_nan),
        config=NpuConfig(calls),
    )
    module.profiler = ModuleType("torch_npu.profiler")  # a subpackage: install() registers it in sys.modules
    vars(module.profiler).update(
        profile=profile, schedule=Schedule, tensorboard_trace_handler=TraceHandler, ProfilerActivity=ProfilerActivity,
        _ExperimentalConfig=ExperimentalConfig,
        ProfilerLevel=SimpleNamespace(Level0="Level0", Level1="Level1", Level2="Level2", Level_none="Level_none"),
        AiCMetrics=SimpleNamespace(PipeUtilization="ACL_AICORE_PIPE_UTILIZATION", AiCoreNone="ACL_AICORE_NONE"),
        ExportType=SimpleNamespace(Db="db", Text="text"),
    )
    module.calls = calls
    return module


def enforce(module: ModuleType, fallback: str = "raise") -> StandinOpCheck:
    """Check every op from now on as torch_npu would (see the module's docstring); returns the active check."""
    check = StandinOpCheck(module, fallback)
    check.__enter__()
    ACTIVE_CHECKS.append(check)
    return check


def leave_checks() -> None:
    """End the op checks that install() began, innermost first (tests/conftest.py, after each test)."""
    while ACTIVE_CHECKS:
        ACTIVE_CHECKS.pop().__exit__(None, None, None)


def host() -> contextlib.AbstractContextManager:
    """A block of host code in a test that installed the stand-in (a reference computed with torchvision, a run on
    --device cpu): its ops are not checked."""
    return _disable_current_modes()


def install(monkeypatch: pytest.MonkeyPatch, fallback: str = "raise") -> ModuleType:
    """Put a fresh stand-in at sys.modules['torch_npu'] for the current test, and check every op until the test ends
    (`fallback`: "raise", "warn" or "run", see the module's docstring); returns the stand-in."""
    module = make_torch_npu()
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    monkeypatch.setitem(sys.modules, "torch_npu.profiler", module.profiler)
    module.op_check = enforce(module, fallback)
    return module


def npu_backend(monkeypatch: pytest.MonkeyPatch, fallback: str = "raise", **options: Any) -> NpuBackend:
    """An NpuBackend on the stand-in, its tensors on the CPU, every op checked (install()); options go to NpuBackend
    (amp, jit_compile, ...)."""
    install(monkeypatch, fallback)
    return NpuBackend(0, device=torch.device("cpu"), **options)


def call_names(module: ModuleType) -> list[str]:
    """The names of the stand-in functions called so far, in order."""
    return [call[0] for call in module.calls]


def write_broken_torch_npu(folder: Path, message: str) -> Path:
    """An installed-looking torch_npu in `folder` whose import raises a bare Exception, as its CANN check does.

    Its dist-info registers torch's autoload entry point exactly as the real wheel does (docs/torch-npu.md, "Autoload"),
    so with `folder` on PYTHONPATH a plain `import torch` fails unless TORCH_DEVICE_BACKEND_AUTOLOAD=0."""
    package = folder / "torch_npu"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"raise Exception({message!r})\n\n\ndef _autoload():\n    pass\n")
    info = folder / "torch_npu-2.14.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.14.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = torch_npu:_autoload\n")
    return folder


def write_cann_toolkit(folder: Path, version: str, monkeypatch: pytest.MonkeyPatch | None = None,
                       arch: str = "x86_64") -> Path:
    """A CANN toolkit folder as its installer lays it out, with the parts torch_npu's CANN package check looks for
    (opp/, runtime/, compiler/: torch_npu/_init/registry/registry_manager.py) and the toolkit's install record,
    <arch>-linux/ascend_toolkit_install.info, whose `version=` line is the one CANN's installation guide reads; with
    `monkeypatch`, ASCEND_HOME_PATH and ASCEND_OPP_PATH point at it as its set_env.sh exports them."""
    for part in ("opp", "runtime", "compiler", f"{arch}-linux"):
        (folder / part).mkdir(parents=True, exist_ok=True)
    (folder / f"{arch}-linux" / "ascend_toolkit_install.info").write_text(
        f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001C23SPC001B231\n"
        f"compatible_version=[V100R001C15],[V100R001C18]\narch={arch}\nos=linux\npath={folder}/{arch}-linux\n")
    if monkeypatch is not None:
        monkeypatch.setenv("ASCEND_HOME_PATH", str(folder))
        monkeypatch.setenv("ASCEND_OPP_PATH", str(folder / "opp"))
    return folder
