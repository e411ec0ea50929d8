"""The collectives the trainer uses, each a no-op at world size 1 and each naming the wait it enters, so that a rank
whose --dist-timeout ran out names the collective and the ranks that went silent (collective_failure); rank-local
work of any length (label checks, caches; the main rank's AutoAnchor, AMP timing and check and labels.png) waits at
patient_barrier, under no deadline."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from detect.errors import UserError
from detect.training.distributed.context import DistContext
from detect.training.distributed.liveness import SILENT_AFTER_S, silent_ranks

T = TypeVar("T")
LOCAL_WORK_TIMEOUT = datetime.timedelta(hours=24)  # what patient_barrier waits, at most
BARRIER_POLL_S = 0.2  # how often patient_barrier looks whether every rank has come
_waiting_in = ["the process group's start"]  # the collective this process last entered (for collective_failure)


def entering(collective: str) -> None:
    """Name the collective this process is about to wait in, for collective_failure's line."""
    _waiting_in[0] = collective


def collective_failure(context: DistContext, error: BaseException, timeout_s: float) -> UserError | None:
    """The one line for a collective that ended because other ranks went silent or away; None for other errors."""
    # gloo's words vary with where it waited: "Timed out waiting ...", "Application timeout caused pair closure", ...
    failed = isinstance(error, dist.DistError) or isinstance(error, RuntimeError) and any(
        sign in str(error).lower() for sign in ("timed out", "timeout", "connection closed", "connection reset", "gloo"))
    if not context.distributed or not failed:
        return None
    silent = silent_ranks(context.store, context.world_size, context.rank)
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


def main_rank_answer(context: DistContext, name: str, work: Callable[[], T]) -> T:
    """`work()` done on the main rank alone, however long it takes (the others wait at patient_barrier `name`), and
    its answer on every rank."""
    answer = work() if context.is_main else None
    patient_barrier(context, name)
    return broadcast_object(context, answer)


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
