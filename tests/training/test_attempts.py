"""How the ranks of a torchrun job agree on one attempt of the job (distributed.join_attempt), on a real TCPStore:
a store that outlived a dead attempt, and nodes whose own restart counts differ."""

from __future__ import annotations

import datetime
import threading
import time

import torch.distributed as dist

from detect.training.distributed import DistContext, join_attempt

TIMEOUT = datetime.timedelta(seconds=30)


def join_all(server: dist.TCPStore, restart_counts: list[int], rank0_delay: float = 0.0) -> list[tuple[str, int]]:
    """Every rank joins from its own thread and store client; rank 0 after `rank0_delay` seconds."""
    results: dict[int, tuple[str, int]] = {}

    def join(rank: int) -> None:
        if rank == 0:
            time.sleep(rank0_delay)
        client = dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=TIMEOUT)
        context = DistContext(rank=rank, world_size=len(restart_counts), restart_count=restart_counts[rank])
        results[rank] = join_attempt(client, context, TIMEOUT)

    threads = [threading.Thread(target=join, args=(rank,)) for rank in range(len(restart_counts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return [results[rank] for rank in range(len(restart_counts))]


def test_a_rank_that_reads_a_dead_attempt_waits_for_the_new_one():
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=TIMEOUT)
    first = join_all(server, [0, 0, 0])
    assert len(set(first)) == 1 and first[0][1] == 0  # one attempt, no restart yet
    # The next attempt's ranks 1 and 2 start first and read the dead attempt's name, which rank 0 never answers.
    second = join_all(server, [0, 1, 0], rank0_delay=1.0)
    assert len(set(second)) == 1, second
    assert second[0][0] != first[0][0] and second[0][1] == 1


def test_the_restart_count_is_the_highest_any_node_saw():
    # A store of this attempt alone (rank 0 hosts it): only node 1's workers failed, so only its count is 1.
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=TIMEOUT)
    assert [restarts for _, restarts in join_all(server, [0, 1])] == [1, 1]
