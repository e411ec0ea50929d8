"""Which ranks of a job are alive: each rank's heartbeat thread writes its wall time into the job's store (JobStore,
torchrun's MASTER_ADDR:MASTER_PORT store under this attempt's prefix); after a failed collective the ranks whose
heartbeats stopped are named (silent_ranks)."""

from __future__ import annotations

import dataclasses
import datetime
import threading
import time

import torch.distributed as dist

HEARTBEAT_S = 2.0  # each rank writes that it is alive this often
SILENT_AFTER_S = 4 * HEARTBEAT_S  # a rank whose last heartbeat is older is silent
STORE_READ_TIMEOUT = datetime.timedelta(seconds=5)  # reading the heartbeats after a failure


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


def silent_ranks(store: JobStore, world_size: int, rank: int) -> list[int] | None:
    """The ranks other than `rank` whose heartbeat is older than SILENT_AFTER_S (or never came); None when the store
    does not answer."""
    try:
        client = store.client(STORE_READ_TIMEOUT)
        now, silent = time.time(), []
        for other in range(world_size):
            key = f"alive/{other}"
            if not client.check([key]) or now - float(client.get(key)) > SILENT_AFTER_S:
                silent.append(other)
        return [other for other in silent if other != rank]
    except Exception:  # noqa: BLE001 - any failure to reach the store means the same: its host is silent too
        return None
