"""The environment variables that change how the NPU, GPU and distributed runtimes behave, checked for values that
slow a run down, break it, or do nothing (docs/torch-npu.md, "Environment variables")."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

OK, INFO, WARN, FAIL = "OK", "INFO", "WARN", "FAIL"  # a Check's status, best to worst

@dataclasses.dataclass(frozen=True)
class Check:
    """One line of the doctor's report: a topic, OK / INFO / WARN / FAIL, what was found and what to do."""

    topic: str
    status: str
    detail: str
    hint: str = ""


def _integer(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _hccl_connect_timeout(value: str) -> str:
    seconds = _integer(value)
    if seconds is None or not 120 <= seconds <= 7200:  # CANN's range; the default is 120 s
        return "must be whole seconds in 120..7200 (default 120)"
    return ""


def _log_level(value: str) -> str:
    level = _integer(value)
    if level not in (0, 1, 2, 3, 4):  # 0 DEBUG, 1 INFO, 2 WARNING, 3 ERROR (default), 4 NULL
        return "must be 0..4 (3, ERROR, is the default)"
    return "DEBUG/INFO logging slows training: use 3 outside debugging" if level < 2 else ""


def _task_queue(value: str) -> str:
    if value not in ("0", "1", "2"):
        return "must be 0, 1 (default) or 2"
    return "0 turns the task queue off and slows training (the docs recommend 1 or 2)" if value == "0" else ""


def _launch_blocking(value: str) -> str:
    return "synchronous launches (debugging only): much slower, and the task queue is off" if value == "1" else ""


def _exists(value: str) -> str:
    return "" if Path(value).is_file() else "no such file"


def _acl_op_init_mode(value: str) -> str:
    if value not in ("0", "1", "2"):
        return "must be 0, 1 or 2 (torch_npu puts its default back for another value)"
    if value == "2":
        return ("2 turns torch_npu's acl ops off: NMS on the NPU (npu_nms_v4, an acl_op only) fails 'Acl op is "
                "disabled!'; unset it or set 0 or 1, or run NMS on the host with --nms-device cpu")
    return ""


def _omp_wait_policy(value: str) -> str:
    if value.upper() == "ACTIVE":
        return "spinning threads take the cores from the DataLoader workers: PASSIVE trains faster here"
    return ""


# name -> (what it does, a rule returning a problem or ""); the names and meanings:
# docs/torch-npu.md, "Environment variables".
VARIABLES: dict[str, tuple[str, Callable[[str], str] | None]] = {
    "ASCEND_RT_VISIBLE_DEVICES": ("the NPUs this process may use", None),
    "ASCEND_HOME_PATH": ("the CANN toolkit (set by set_env.sh)", None),
    "ASCEND_GLOBAL_LOG_LEVEL": ("CANN log level", _log_level),
    "ASCEND_GLOBAL_EVENT_ENABLE": ("CANN event logging 0/1", None),
    "ASCEND_SLOG_PRINT_TO_STDOUT": ("CANN logs to stdout", None),
    "ASCEND_LAUNCH_BLOCKING": ("synchronous NPU launches", _launch_blocking),
    "TASK_QUEUE_ENABLE": ("torch_npu's launch queue", _task_queue),
    "TORCH_NPU_FALLBACK_CPU_DISABLE": ("1: an op without an NPU kernel fails instead of running on the CPU", None),
    "ACL_OP_INIT_MODE": (("torch_npu's legacy acl ops: 0 set up at start, 1 when first used (the 910B's default), "
                          "2 off"), _acl_op_init_mode),
    "PYTORCH_NPU_ALLOC_CONF": ("NPU caching-allocator options", None),
    "HCCL_CONNECT_TIMEOUT": ("seconds HCCL waits to connect", _hccl_connect_timeout),
    "HCCL_EXEC_TIMEOUT": ("seconds an HCCL collective may run", None),
    "HCCL_IF_IP": ("the network interface HCCL binds", None),
    "HCCL_BUFFSIZE": ("HCCL buffer size, MB", None),
    "HCCL_WHITELIST_DISABLE": ("legacy: old CANN releases only", None),
    "RANK_TABLE_FILE": ("HCCL rank table (big clusters; raise HCCL_CONNECT_TIMEOUT with it)", _exists),
    "CUDA_VISIBLE_DEVICES": ("the GPUs this process may use", None),
    "NCCL_DEBUG": ("NCCL logging", None),
    "NCCL_SOCKET_IFNAME": ("the network interface NCCL binds", None),
    "TORCH_DEVICE_BACKEND_AUTOLOAD": ("0: torch does not load torch_npu by itself; python -m detect.* sets 0", None),
    "OMP_NUM_THREADS": ("CPU threads per process", None),
    "OMP_WAIT_POLICY": ("how torch's CPU threads wait; python -m detect.* sets PASSIVE", _omp_wait_policy),
}


def environment_checks(environ: Mapping[str, str]) -> list[Check]:
    """One check per variable of VARIABLES that is set: INFO with its meaning, or WARN with what is wrong as hint."""
    checks = []
    for name, (meaning, rule) in VARIABLES.items():
        if name not in environ:
            continue
        value = environ[name]
        problem = rule(value) if rule is not None else ""
        checks.append(Check(name, WARN if problem else INFO, f"{value!r} ({meaning})", problem))
    return checks
