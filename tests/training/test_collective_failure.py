"""The one line for a collective that failed: every wording gloo uses for a peer that went away is recognised, and
the line names the silent rank (read from the heartbeats in a real TCPStore) and the collective waited in."""

from __future__ import annotations

import time

import pytest
import torch.distributed as dist

from detect.training.distributed import DistContext, JobStore, collective_failure, entering


@pytest.fixture()
def context():
    """Rank 0 of two, whose store holds a fresh heartbeat for rank 0 and a stale one for rank 1."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    job = JobStore("127.0.0.1", server.port, "detect/test/")
    beats = dist.PrefixStore(job.prefix, server)
    beats.set("alive/0", str(time.time()))
    beats.set("alive/1", str(time.time() - 60))
    yield DistContext(rank=0, world_size=2, store=job)
    del server


@pytest.mark.parametrize("message", [
    "Application timeout caused pair closure",  # gloo, in DDP's buffer broadcast (a frozen peer)
    "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 12000ms for recv",
    "Connection closed by peer [127.0.0.1]:40000",
])
def test_a_peer_gone_silent_gives_one_line_naming_it(context, message):
    entering("DDP's forward (its broadcast of rank 0's BatchNorm buffers)")
    line = str(collective_failure(context, RuntimeError(message), 12))
    assert line.startswith("rank 0 waited 12 s (--dist-timeout) in DDP's forward"), line
    assert "rank 1 went silent" in line, line


def test_other_errors_are_left_alone(context):
    assert collective_failure(context, RuntimeError("mat1 and mat2 shapes cannot be multiplied"), 12) is None
    assert collective_failure(DistContext(), RuntimeError("Timed out"), 12) is None
