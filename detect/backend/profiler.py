"""Profiling: which steps a profiler records, where each device's profiler leaves its trace, and what the trace
says (operators by self time, device kernels, the data-loading share of each step).

Backend.profiler() records (torch.profiler on cpu/cuda, torch_npu.profiler on npu). Both write Chrome trace JSON,
which Perfetto (ui.perfetto.dev) opens: torch as <folder>/<worker>.<time>.pt.trace.json (TensorBoard's profiler
plugin reads the folder), torch_npu as <folder>/<worker>_<time>_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json
with kernel_details.csv beside it (torch_npu 2.14.0: profiler/_profiler_path_creator.py, analysis/prof_view/).
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections import defaultdict
from pathlib import Path

from detect.errors import UserError

TRACE_PATTERNS = ("*.pt.trace.json", "*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json")
HOST_CATEGORIES = {"cpu_op", "user_annotation"}  # torch's kinds of host ranges; torch_npu calls all of them cpu_op
STEP_PREFIX = "ProfilerStep#"  # the range each profiler.step() opens (torch and torch_npu)
LOADER_PREFIX = "enumerate(DataLoader)#"  # the range torch's DataLoader iterator puts around each __next__


@dataclasses.dataclass(frozen=True)
class ProfileSchedule:
    """Steps to skip (wait), to run the profiler without keeping (warmup), then to record (active); once."""

    wait: int = 3
    warmup: int = 1
    active: int = 3

    def __post_init__(self) -> None:
        if self.wait < 0 or self.warmup < 0 or self.active < 1:
            raise UserError(f"--profile {self.wait} {self.warmup} {self.active}: WAIT and WARMUP must be >= 0 and "
                            "ACTIVE >= 1")

    @classmethod
    def from_flag(cls, values: list[int]) -> ProfileSchedule:
        """From `--profile` (the defaults) or `--profile WAIT WARMUP ACTIVE`."""
        if len(values) not in (0, 3):
            raise UserError(f"--profile takes no value or three (WAIT WARMUP ACTIVE), got {len(values)}")
        return cls(*values)

    @property
    def steps(self) -> int:
        """Steps the schedule needs before its trace is complete."""
        return self.wait + self.warmup + self.active


@dataclasses.dataclass(frozen=True)
class OpTime:
    """Time one operator (or kernel) name took over the recorded steps, and how many times it ran."""

    name: str
    calls: int
    microseconds: float


@dataclasses.dataclass(frozen=True)
class StepTime:
    """One recorded step: its length and the part spent waiting in the data loader."""

    name: str
    microseconds: float
    loading_microseconds: float


@dataclasses.dataclass(frozen=True)
class TraceSummary:
    """Host operators by self time, device kernels by time (both longest first) and the recorded steps."""

    trace: Path
    host_ops: tuple[OpTime, ...]
    device_kernels: tuple[OpTime, ...]
    steps: tuple[StepTime, ...]


def find_trace(folder: Path) -> Path:
    """The newest trace a profiler wrote under `folder`; a UserError when there is none."""
    traces = [path for pattern in TRACE_PATTERNS for path in Path(folder).glob(pattern)]
    if not traces:
        raise UserError(f"no profiler trace in {folder} (nothing was recorded: did the epoch have enough batches?)")
    return max(traces, key=lambda path: path.stat().st_mtime)


def _events(path: Path) -> list[dict]:
    """The complete ('X') events of a trace: torch writes {"traceEvents": [...]}, torch_npu a bare list."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not a readable trace ({type(error).__name__}: {error})") from None
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    # torch_npu writes ts as a string of microseconds (analysis/prof_common_func/_trace_event_manager.py).
    return [{**event, "ts": float(event["ts"]), "dur": float(event.get("dur", 0))}
            for event in events if isinstance(event, dict) and event.get("ph") == "X" and "ts" in event]


def _self_times(host: list[dict]) -> list[tuple[dict, float]]:
    """(event, its duration less that of the ranges directly inside it) for nested host ranges, per thread."""
    threads: dict[tuple, list[dict]] = defaultdict(list)
    for event in host:
        threads[(event.get("pid"), event.get("tid"))].append(event)
    result = []
    for events in threads.values():
        stack: list[list] = []  # [event, time of its children]
        for event in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= event["ts"]:
                done, children = stack.pop()
                result.append((done, done["dur"] - children))
            if stack:
                stack[-1][1] += event["dur"]
            stack.append([event, 0.0])
        result.extend((done, done["dur"] - children) for done, children in stack)
    return result


def _ranked(times: list[tuple[str, float]]) -> tuple[OpTime, ...]:
    calls: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    for name, microseconds in times:
        calls[name] += 1
        total[name] += microseconds
    return tuple(sorted((OpTime(name, calls[name], total[name]) for name in total), key=lambda op: -op.microseconds))


def _npu_kernels(trace: Path) -> list[tuple[str, float]]:
    """(op type, duration) of each NPU kernel in torch_npu's kernel_details.csv beside trace_view.json, if any."""
    table = trace.parent / "kernel_details.csv"
    if trace.name != "trace_view.json" or not table.is_file():
        return []
    with open(table, newline="") as handle:
        return [(row["Type"], float(row["Duration(us)"])) for row in csv.DictReader(handle)]


def summarize(trace: Path) -> TraceSummary:
    """Read a trace: host operators by self time, device kernels (CUDA kernels, NPU kernel types), steps."""
    events = _events(trace)
    host = [event for event in events if event.get("cat") in HOST_CATEGORIES]
    ranges = (STEP_PREFIX, LOADER_PREFIX)
    host_ops = _ranked([(event["name"], own) for event, own in _self_times(host)
                        if event.get("cat") == "cpu_op" and not event["name"].startswith(ranges)])
    kernels = [(event["name"], event["dur"]) for event in events if event.get("cat") == "kernel"]
    loads = [event for event in host if event["name"].startswith(LOADER_PREFIX)]
    steps = []
    for step in sorted((e for e in host if e["name"].startswith(STEP_PREFIX)), key=lambda e: e["ts"]):
        end = step["ts"] + step["dur"]
        loading = sum(load["dur"] for load in loads if step["ts"] <= load["ts"] < end)
        steps.append(StepTime(step["name"], step["dur"], loading))
    return TraceSummary(trace, host_ops, _ranked(kernels + _npu_kernels(trace)), tuple(steps))


def _op_lines(title: str, ops: tuple[OpTime, ...], top: int) -> list[str]:
    total = sum(op.microseconds for op in ops) or 1.0
    lines = [f"{title} ({total / 1e3:.1f} ms in all):", f"  {'ms':>10} {'share':>7} {'calls':>6}  name"]
    return lines + [f"  {op.microseconds / 1e3:>10.2f} {op.microseconds / total:>7.1%} {op.calls:>6}  {op.name}"
                    for op in ops[:top]]


def format_summary(summary: TraceSummary, top: int = 10) -> str:
    """The summary as text: where the trace is, the top operators and kernels, and each step's loading share."""
    lines = [f"trace: {summary.trace} (open it in ui.perfetto.dev; TensorBoard reads its folder)"]
    lines += _op_lines(f"top {top} host operators by self time", summary.host_ops, top)
    if summary.device_kernels:
        lines += _op_lines(f"top {top} device kernels by time", summary.device_kernels, top)
    lines.append("data loading per recorded step:")
    for step in summary.steps:
        share = step.loading_microseconds / step.microseconds if step.microseconds else 0.0
        lines.append(f"  {step.name}: {step.microseconds / 1e3:.1f} ms, waiting for data "
                     f"{step.loading_microseconds / 1e3:.1f} ms ({share:.1%})")
    if not summary.steps:
        lines.append("  (no step markers in this trace)")
    return "\n".join(lines)
