"""torch.distributed as the trainer uses it: one DistContext, collectives that do nothing at world size 1.

Launched by torchrun (one node or many), which sets RANK, WORLD_SIZE and LOCAL_RANK. When a worker process dies,
torchrun's agent stops the others within its monitor interval and names the failed rank; a rank that hangs instead
is caught by the process group's timeout, which every collective below inherits.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from detect.errors import UserError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class DistContext:
    """Where this process stands in the job: global rank, world size, rank on this node, restart count."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    restart_count: int = 0
    run_id: str = ""
    # The rank that evaluates and writes the run folder: 0, or after an elastic restart on storage that is not
    # shared, whichever rank holds the job's run folder (training/checkpoints.py, share_resume_point).
    main_rank: int = 0

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
                restart_count=int(environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
                run_id=environ.get("TORCHELASTIC_RUN_ID", ""),
            )
        except ValueError as error:
            raise UserError(f"RANK, WORLD_SIZE, LOCAL_RANK must be integers ({error})") from None


def init_process_group(context: DistContext, backend_name: str, timeout_s: float,
                       environ: Mapping[str, str] = os.environ) -> None:
    """Join the job's process group through torchrun's MASTER_ADDR:MASTER_PORT store; nothing at world size 1.

    Each torchrun restart gets its own key prefix: the store can outlive a restart, and a rank that read the dead
    attempt's peer addresses from it would try to connect to them (seen with torch 2.14's --standalone rendezvous).
    """
    if not context.distributed:
        return
    try:
        host, port = environ["MASTER_ADDR"], int(environ["MASTER_PORT"])
    except (KeyError, ValueError):
        raise UserError("WORLD_SIZE > 1 but MASTER_ADDR/MASTER_PORT are not set: launch with torchrun") from None
    timeout = datetime.timedelta(seconds=timeout_s)
    agent_hosts_store = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(host, port, context.world_size, is_master=context.rank == 0 and not agent_hosts_store,
                          timeout=timeout)
    store = dist.PrefixStore(f"detect/restart{context.restart_count}", store)
    dist.init_process_group(backend=backend_name, store=store, rank=context.rank, world_size=context.world_size,
                            timeout=timeout)


def destroy_process_group(context: DistContext) -> None:
    """Leave the process group, if this process joined one."""
    if context.distributed and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(context: DistContext, value: T) -> T:
    """The main rank's `value` on every rank (any picklable object)."""
    if not context.distributed:
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=context.main_rank)
    return holder[0]


def gather_objects(context: DistContext, value: Any) -> list[Any]:
    """Every rank's `value`, in rank order, on the main rank; an empty list elsewhere."""
    if not context.distributed:
        return [value]
    gathered: list[Any] | None = [None] * context.world_size if context.is_main else None
    dist.gather_object(value, gathered, dst=context.main_rank)
    return gathered or []


def all_gather_objects(context: DistContext, value: Any) -> list[Any]:
    """Every rank's `value`, in rank order, on every rank."""
    if not context.distributed:
        return [value]
    gathered: list[Any] = [None] * context.world_size
    dist.all_gather_object(gathered, value)
    return gathered


def any_rank(context: DistContext, flags: torch.Tensor) -> torch.Tensor:
    """Each of `flags` (a 1-D bool tensor on the backend's device) true where it is true on any rank."""
    if not context.distributed:
        return flags
    value = flags.to(torch.int32)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value.bool()


def barrier(context: DistContext) -> None:
    """Wait for every rank."""
    if context.distributed:
        dist.barrier()


def replicas_in_sync(context: DistContext, tensors: Iterable[torch.Tensor]) -> bool:
    """Whether every rank holds the same tensors (their sums, compared by a MIN and a MAX all-reduce)."""
    if not context.distributed:
        return True
    sums = torch.stack([tensor.detach().float().sum() for tensor in tensors])
    low, high = sums.clone(), sums.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return bool(torch.equal(low, high))
