"""The launch of one rank per device of `--device 0,1,2,3` outside torchrun: torch's elastic launcher (what torchrun
runs; yolov5 falls back to DataParallel here) runs the same command line once per device; a failed rank ends the
others and is named."""

from __future__ import annotations

import logging
import signal
import socket
import sys
import uuid

from detect.backend import DeviceRequest, select
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)
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
