"""torch.distributed as the trainer uses it: one DistContext, collectives that do nothing at world size 1, each rank's
host cores (--cpu-affinity), and the launch of one rank per device of `--device 0,1,2,3` outside torchrun.

Launched by torchrun (one node or many), or by `launch_ranks` (torch's elastic launcher, what torchrun runs: yolov5
falls back to DataParallel here), which runs the same command line once per device. When a worker process dies,
torchrun's agent stops the others within its monitor interval and names it; a rank that hangs instead is caught by
--dist-timeout, which every collective inherits: the rank that waited names the ranks whose heartbeats in the job's
store stopped and the collective it waited in (collective_failure). Rank-local work of any length (label checks,
caches; the main rank's AutoAnchor, AMP check and labels.png) waits at patient_barrier, under no deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from detect.backend import Backend, DeviceRequest, parse_devices, select
from detect.backend.placement import available_cores, parse_cores, pin, plan_cores
from detect.errors import UserError

T = TypeVar("T")
LOGGER = logging.getLogger(__name__)
HEARTBEAT_S = 2.0  # each rank writes that it is alive this often
SILENT_AFTER_S = 4 * HEARTBEAT_S  # a rank whose last heartbeat is older is silent
LOCAL_WORK_TIMEOUT = datetime.timedelta(hours=24)  # what patient_barrier waits, at most
STORE_READ_TIMEOUT = datetime.timedelta(seconds=5)  # reading the heartbeats after a failure
BARRIER_POLL_S = 0.2  # how often patient_barrier looks whether every rank has come
_waiting_in = ["the process group's start"]  # the collective this process last entered (for collective_failure)
_groups_joined = [0]  # process groups this process joined: only its first can be an elastic restart's


@dataclasses.dataclass(frozen=True)
class JobStore:
    """Where this attempt of the job keeps its keys: torchrun's MASTER_ADDR:MASTER_PORT store, under a prefix."""

    host: str
    port: int
    prefix: str

    def client(self, timeout: datetime.timedelta) -> dist.Store:
        """A connection of its own, whose every call waits at most `timeout`."""
        store = dist.TCPStore(self.host, self.port, is_master=False, timeout=timeout, wait_for_workers=False)
        return dist.PrefixStore(self.prefix, store)


@dataclasses.dataclass(frozen=True)
class DistContext:
    """Where this process stands in the job: global rank, world size, rank on this node, the job's restart count
    (after init_process_group: the one all ranks agree on)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1  # ranks on this node
    restart_count: int = 0
    run_id: str = ""
    # The rank that evaluates and writes the run folder: 0, or after an elastic restart on storage that is not
    # shared, whichever rank holds the job's run folder (training/resume.py, resume_point).
    main_rank: int = 0
    store: JobStore | None = None  # after init_process_group
    heartbeat: Heartbeat | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def is_main(self) -> bool:
        """The main rank evaluates and writes; the others only train."""
        return self.rank == self.main_rank

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> DistContext:
        """The context torchrun describes in the environment; a single process without it."""
        try:
            return cls(
                rank=int(environ.get("RANK", 0)),
                world_size=int(environ.get("WORLD_SIZE", 1)),
                local_rank=int(environ.get("LOCAL_RANK", 0)),
                local_world_size=int(environ.get("LOCAL_WORLD_SIZE", 1)),
                restart_count=int(environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
                run_id=environ.get("TORCHELASTIC_RUN_ID", ""),
            )
        except ValueError as error:
            raise UserError(f"RANK, WORLD_SIZE, LOCAL_RANK must be integers ({error})") from None


def init_process_group(context: DistContext, backend_name: str, timeout_s: float,
                       environ: Mapping[str, str] = os.environ) -> DistContext:
    """Join the job's process group through torchrun's MASTER_ADDR:MASTER_PORT store; nothing at world size 1.
    Returns the context with the job's restart count, which every rank agrees on (join_attempt)."""
    if not context.distributed:
        return context
    try:
        host, port = environ["MASTER_ADDR"], int(environ["MASTER_PORT"])
    except (KeyError, ValueError):
        raise UserError("WORLD_SIZE > 1 but MASTER_ADDR/MASTER_PORT are not set: launch with torchrun") from None
    timeout = datetime.timedelta(seconds=timeout_s)
    agent_hosts_store = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    # A script that trains twice in one job (every --evolve trial after the first) starts a new run each time: only a
    # process's first group can continue an elastic restart.
    first_group = _groups_joined[0] == 0
    _groups_joined[0] += 1
    # The join waits in C++ for ranks that may never come, where no Python handler runs: a signal ends it at once.
    with stop_signals_handled_by(signal.SIG_DFL):
        store = dist.TCPStore(host, port, context.world_size, is_master=context.rank == 0 and not agent_hosts_store,
                              timeout=timeout)
        joining = context if first_group else dataclasses.replace(context, restart_count=0)
        attempt, restarts = join_attempt(store, joining, timeout, new_process=first_group)
        dist.init_process_group(backend=backend_name, store=dist.PrefixStore(f"detect/{attempt}/", store),
                                rank=context.rank, world_size=context.world_size, timeout=timeout)
    job = JobStore(host, port, f"detect/{attempt}/")
    return dataclasses.replace(context, restart_count=restarts, store=job, heartbeat=Heartbeat(job, context.rank))


@contextlib.contextmanager
def stop_signals_handled_by(handler: Any) -> Iterator[None]:
    """SIGTERM and SIGINT handled by `handler` (a function, or signal.SIG_DFL) in the body (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for number, before in previous.items():
            signal.signal(number, before)


class Heartbeat:
    """A thread writing this rank's wall time into the job's store every HEARTBEAT_S over its own connection."""

    def __init__(self, job: JobStore, rank: int) -> None:
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, args=(job, rank), name="detect-heartbeat", daemon=True)
        self.thread.start()

    def _beat(self, job: JobStore, rank: int) -> None:
        try:
            store = job.client(datetime.timedelta(seconds=30))
            while True:
                store.set(f"alive/{rank}", str(time.time()))
                if self.stopped.wait(HEARTBEAT_S):
                    return
        except Exception:  # noqa: BLE001 - the store went away: the job ends, and the failure is reported elsewhere
            return

    def stop(self) -> None:
        """End the thread (its store connection closes with it)."""
        self.stopped.set()
        self.thread.join(HEARTBEAT_S)


def silent_ranks(context: DistContext) -> list[int] | None:
    """The ranks whose heartbeat is older than SILENT_AFTER_S (or never came); None when the store does not answer."""
    try:
        store = context.store.client(STORE_READ_TIMEOUT)
        now, silent = time.time(), []
        for rank in range(context.world_size):
            key = f"alive/{rank}"
            if not store.check([key]) or now - float(store.get(key)) > SILENT_AFTER_S:
                silent.append(rank)
        return [rank for rank in silent if rank != context.rank]
    except Exception:  # noqa: BLE001 - any failure to reach the store means the same: its host is silent too
        return None


def collective_failure(context: DistContext, error: BaseException, timeout_s: float) -> UserError | None:
    """The one line for a collective that ended because other ranks went silent or away; None for other errors."""
    # gloo's words vary with where it waited: "Timed out waiting ...", "Application timeout caused pair closure", ...
    failed = isinstance(error, dist.DistError) or isinstance(error, RuntimeError) and any(
        sign in str(error).lower() for sign in ("timed out", "timeout", "connection closed", "connection reset", "gloo"))
    if not context.distributed or not failed:
        return None
    silent = silent_ranks(context)
    if silent is None:
        who = f"the job's store at {context.store.host}:{context.store.port} does not answer (its node is silent)"
    elif silent:
        who = f"rank{'s' * (len(silent) > 1)} {', '.join(map(str, silent))} went silent (no heartbeat for " \
              f"{SILENT_AFTER_S:.0f} s)"
    else:
        who = "every rank still beats, but the collective did not complete"
    return UserError(f"rank {context.rank} waited {timeout_s:g} s (--dist-timeout) in {_waiting_in[0]}: {who}; "
                     "ending this rank so that torchrun (--max-restarts) or the scheduler restarts the job from "
                     "last.pt")


def entering(collective: str) -> None:
    """Name the collective this process is about to wait in, for collective_failure's line."""
    _waiting_in[0] = collective


def patient_barrier(context: DistContext, name: str) -> None:
    """Wait for every rank through the store, under no collective's deadline: around rank-local work of any length."""
    if not context.distributed:
        return
    store = context.store.client(LOCAL_WORK_TIMEOUT)
    store.set(f"barrier/{name}/{context.rank}", "1")
    keys = [f"barrier/{name}/{rank}" for rank in range(context.world_size)]
    deadline = time.monotonic() + LOCAL_WORK_TIMEOUT.total_seconds()
    # Polled: a signal handler (SIGTERM ends the set-up at once) would run only when a store.wait returned.
    while not store.check(keys):
        if time.monotonic() > deadline:
            raise dist.DistStoreError(f"rank {context.rank} waited {LOCAL_WORK_TIMEOUT} at the barrier {name!r}")
        time.sleep(BARRIER_POLL_S)


def join_attempt(store: dist.Store, context: DistContext, timeout: datetime.timedelta,
                 new_process: bool = True) -> tuple[str, int]:
    """A name for this attempt of the job (its store keys' prefix) and the job's restart count, the same on every rank.

    torchrun's agent store outlives a restart, and a rank that read the dead attempt's keys (its peers' addresses)
    would try to connect to them; TORCHELASTIC_RESTART_COUNT counts only the restarts this node's own workers caused
    (a node restarted for another node's failure keeps 0). So rank 0 names each attempt afresh, counts its starts
    in the store, and answers every rank's one-time nonce under that name; a rank that read a dead attempt's name
    gets no answer and reads the name again. A process's later groups (`new_process` False: it trains again) are not
    starts of the job.
    """
    if context.rank == 0:
        attempt = uuid.uuid4().hex
        earlier_starts = store.add("detect/starts", 1) - 1 if new_process else 0
        store.set("detect/attempt", attempt)
        joined = [f"detect/{attempt}/joined/{rank}" for rank in range(1, context.world_size)]
        store.wait(joined, timeout)
        reports = [json.loads(store.get(key)) for key in joined]
        restarts = max([earlier_starts, context.restart_count, *(report["restarts"] for report in reports)])
        for report in reports:
            store.set(f"detect/{attempt}/answer/{report['nonce']}", str(restarts))
        return attempt, restarts
    nonce, deadline = uuid.uuid4().hex, time.monotonic() + timeout.total_seconds()
    while time.monotonic() < deadline:
        attempt = store.get("detect/attempt").decode()
        store.set(f"detect/{attempt}/joined/{context.rank}",
                  json.dumps({"nonce": nonce, "restarts": context.restart_count}))
        answer = f"detect/{attempt}/answer/{nonce}"
        for _ in range(20):  # 2 s for rank 0 to answer, then read the attempt's name again
            if store.check([answer]):
                return attempt, int(store.get(answer))
            time.sleep(0.1)
    raise dist.DistStoreError(f"rank {context.rank}: rank 0 did not answer within {timeout}")


def destroy_process_group(context: DistContext) -> None:
    """Leave the process group, if this process joined one, and stop its heartbeat."""
    if context.heartbeat is not None:
        context.heartbeat.stop()
    if context.distributed and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(context: DistContext, value: T) -> T:
    """The main rank's `value` on every rank (any picklable object)."""
    if not context.distributed:
        return value
    holder = [value]
    entering("a broadcast from the main rank")
    dist.broadcast_object_list(holder, src=context.main_rank)
    return holder[0]


def broadcast_tensors(context: DistContext, tensors: Iterable[torch.Tensor]) -> None:
    """The main rank's values of `tensors` (the same shapes on every rank, on the backend's device) into every
    rank's, in place."""
    if context.distributed:
        entering("the broadcast of the main rank's EMA weights")
        for tensor in tensors:
            dist.broadcast(tensor, src=context.main_rank)


def gather_objects(context: DistContext, value: Any) -> list[Any]:
    """Every rank's `value`, in rank order, on the main rank; an empty list elsewhere."""
    if not context.distributed:
        return [value]
    gathered: list[Any] | None = [None] * context.world_size if context.is_main else None
    entering("a gather to the main rank")
    dist.gather_object(value, gathered, dst=context.main_rank)
    return gathered or []


def all_gather_objects(context: DistContext, value: Any) -> list[Any]:
    """Every rank's `value`, in rank order, on every rank."""
    if not context.distributed:
        return [value]
    gathered: list[Any] = [None] * context.world_size
    entering("an all-gather")
    dist.all_gather_object(gathered, value)
    return gathered


def any_rank(context: DistContext, flags: torch.Tensor,
             collective: str = "the step's all-reduce of its flags (non-finite loss, stop, save)") -> torch.Tensor:
    """Each of `flags` (a 1-D bool tensor on the backend's device) true where it is true on any rank; `collective`
    names the wait for collective_failure."""
    if not context.distributed:
        return flags
    value = flags.to(torch.int32)
    entering(collective)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value.bool()


def host_cores(spec: str, device: str, backend: Backend, context: DistContext) -> list[int] | None:
    """--cpu-affinity `spec`: pin this rank (and the loader workers it forks) to its own host cores (placement.py);
    the cores, or None when the OS places it (none, or auto on the CPU). `device` is --device."""
    if spec == "none" or spec == "auto" and backend.name == "cpu":
        return None
    if spec == "auto":
        request = parse_devices(device)
        if not context.distributed:
            devices = [backend.device.index]
        elif len(request.indices) > 1:  # --device 0,1,...: local rank r takes the r-th (build.select_backend)
            devices = list(request.indices)
        else:
            devices = list(range(context.local_world_size))
        cores = plan_cores(available_cores(), devices[:context.local_world_size], backend.local_cores,
                           context.local_rank)
    else:
        lists = spec.split(":")
        if len(lists) < context.local_world_size:
            raise UserError(f"--cpu-affinity {spec}: {len(lists)} core lists for {context.local_world_size} ranks "
                            "on this node")
        cores = parse_cores(lists[context.local_rank])
    pin(cores)
    LOGGER.info("rank %d runs on host cores %s", context.rank, ",".join(map(str, cores)))
    return cores


def one_voice(context: DistContext) -> None:
    """Info lines from the main rank only, the others' warnings and errors: set again once the main rank is known
    (after an elastic restart on storage that is not shared, maybe not RANK 0). One process keeps its logging."""
    if context.distributed:
        logging.getLogger().setLevel(logging.INFO if context.is_main else logging.WARNING)


def replicas_in_sync(context: DistContext, tensors: Iterable[torch.Tensor]) -> bool:
    """Whether every rank holds the same tensors (their sums, compared by a MIN and a MAX all-reduce)."""
    if not context.distributed:
        return True
    sums = torch.stack([tensor.detach().float().sum() for tensor in tensors])
    low, high = sums.clone(), sums.clone()
    entering("the final comparison of the replicas")
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return bool(torch.equal(low, high))


MONITOR_INTERVAL_S = 1.0  # how often the launcher looks at its ranks: a failed rank ends the job within this


def _free_port() -> int:
    with socket.socket() as probe:  # a port free on the loopback now, for this one-node job's rendezvous
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _failure_line(error: Exception) -> str:
    """One line naming each rank that failed and its exit code, then the ranks the launcher stopped because of it
    (SIGTERM: torch's ChildFailedError lists them among the failures)."""
    failures = sorted((getattr(error, "failures", None) or {}).items())
    if not failures:
        return str(error).strip().splitlines()[0]
    failed = [(rank, failure) for rank, failure in failures if failure.exitcode != -signal.SIGTERM] or failures
    stopped = [rank for rank, failure in failures if (rank, failure) not in failed]
    line = "; ".join(f"rank {rank} exited with code {failure.exitcode}" for rank, failure in failed)
    return line + (f"; the launcher stopped rank {', '.join(map(str, stopped))}" if stopped else "")


def launch_ranks(argv: list[str], devices: DeviceRequest) -> None:
    """Run `python -m detect.train argv` as one rank per device on this machine; a failed rank ends the others and
    raises UserError naming it (its own error line is above)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    for position in range(len(devices.indices)):  # every listed device exists, before any rank starts
        select(devices.spec(position), amp=False)
    count = len(devices.indices)
    LOGGER.info("starting %d ranks, one per device of --device %s (torch's elastic launcher)", count,
                ",".join(map(str, devices.indices)))
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=count, run_id=f"detect-{uuid.uuid4().hex[:12]}",
                          rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{_free_port()}", max_restarts=0,
                          monitor_interval=MONITOR_INTERVAL_S)
    try:
        elastic_launch(config, entrypoint=sys.executable)("-m", "detect.train", *argv)
    except ChildFailedError as error:
        raise UserError(f"the {count}-rank job failed: {_failure_line(error)}") from None
