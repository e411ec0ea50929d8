"""Where a process stands in the job (DistContext) and how it joins the job's process group: through torchrun's
store, every rank agreeing on the attempt and its restart count (join_attempt); each rank's host cores
(--cpu-affinity) and whose log lines show."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import torch.distributed as dist

from detect.backend import Backend, parse_devices
from detect.backend.placement import available_cores, parse_cores, pin, plan_cores
from detect.errors import UserError
from detect.training.distributed.liveness import Heartbeat, JobStore

LOGGER = logging.getLogger(__name__)
_groups_joined = [0]  # process groups this process joined: only its first can be an elastic restart's


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


def host_cores(spec: str, device: str, backend: Backend, context: DistContext) -> list[int] | None:
    """--cpu-affinity `spec`: pin this rank (and the loader workers it forks) to its own host cores (placement.py);
    the cores, or None when the OS places it (none, or auto on the CPU). `device` is --device."""
    if spec == "none" or spec == "auto" and backend.name == "cpu":
        return None
    if spec == "auto":
        request = parse_devices(device)
        if not context.distributed:
            devices = [backend.device.index]
        elif len(request.indices) > 1:  # --device 0,1,...: local rank r takes the r-th (recipe.precision_request)
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
