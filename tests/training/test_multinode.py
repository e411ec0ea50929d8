"""Two torchrun "nodes" on loopback (c10d rendezvous on 127.0.0.1), each in its own working folder with its own copy
of the data: no shared storage. One run folder, on the node whose rank writes it; identical replicas; and an elastic
restart that resumes a node that cannot see the run folder from the checkpoint the other node sends it."""

from __future__ import annotations

import csv
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from detect.training.resume import TrainingCheckpoint
from tests.training.helpers import tiny_dataset, worker_pid

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_nodes(root: Path, epochs: int, max_restarts: int = 0, *extra: str) -> list[tuple[Path, subprocess.Popen]]:
    """Node 0 and node 1 of one job, each a torchrun of one worker in root/node<N> (relative --data and --project),
    `extra` added to detect.train's flags."""
    endpoint, job = f"127.0.0.1:{free_port()}", uuid.uuid4().hex[:8]
    nodes = []
    for node_rank in (0, 1):
        folder = root / f"node{node_rank}"
        tiny_dataset(folder / "data")
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                   "--node-rank", str(node_rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                   "--rdzv-id", job, "--max-restarts", str(max_restarts), "-m", "detect.train",
                   "--cfg", "yolov5n.yaml", "--data", "data/data.yaml", "--imgsz", "64", "--batch-size", "4",
                   "--epochs", str(epochs), "--workers", "0", "--device", "cpu", "--project", "runs", "--noval",
                   "--no-progress", *extra]
        environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        nodes.append((folder, subprocess.Popen(command, cwd=folder, env=environ, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True)))
        if node_rank == 0:  # node 0's agent hosts the rendezvous store (and so the job's), whatever the pids
            wait_for_port(endpoint, nodes[0][1])
    return nodes


def wait_for_port(endpoint: str, launcher: subprocess.Popen, timeout: float = 60) -> None:
    host, port = endpoint.split(":")
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            assert launcher.poll() is None and time.monotonic() < deadline, "node 0's agent never listened"
            time.sleep(0.1)


def environment_of(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(entry.split("=", 1) for entry in entries if "=" in entry)


def finish(nodes) -> list[str]:
    outputs = [launcher.communicate(timeout=300)[0] for _, launcher in nodes]
    codes = [launcher.returncode for _, launcher in nodes]
    # Both nodes' tails: when one node fails, the other often only reports that the rendezvous store went away.
    assert codes == [0, 0], "\n".join(f"node {rank}, exit {code}:\n{output[-2500:]}"
                                       for rank, (code, output) in enumerate(zip(codes, outputs)))
    return outputs


def run_folders(nodes) -> list[Path]:
    return [path for folder, _ in nodes for path in (folder / "runs").glob("*")]


def wait_for_last(nodes, timeout: float = 300) -> Path:
    """The folder of the node that holds the run, once its last.pt is written."""
    deadline = time.monotonic() + timeout
    while not run_folders(nodes) or not (run_folders(nodes)[0] / "weights" / "last.pt").is_file():
        assert all(launcher.poll() is None for _, launcher in nodes), [launcher.communicate()[0] for _, launcher
                                                                        in nodes]
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.2)
    return run_folders(nodes)[0].parents[1]


def test_two_nodes_without_shared_storage_train_one_run(tmp_path):
    nodes = start_nodes(tmp_path, epochs=2)
    outputs = finish(nodes)
    folders = run_folders(nodes)
    assert len(folders) == 1 and folders[0].name == "exp", folders  # global rank 0 alone writes
    assert any("all 2 ranks hold identical parameters" in output for output in outputs)
    assert TrainingCheckpoint.load(folders[0] / "weights" / "last.pt").counters.epoch == 2


def test_elastic_restart_resumes_a_node_that_cannot_see_the_run_folder(tmp_path):
    epochs = 6
    nodes = start_nodes(tmp_path, epochs=epochs, max_restarts=1)
    holder = wait_for_last(nodes)
    other = next(launcher for folder, launcher in nodes if folder != holder)
    os.kill(worker_pid(other, "LOCAL_RANK=0"), signal.SIGKILL)  # the rank on the node without the run folder dies once
    outputs = finish(nodes)
    assert run_folders(nodes) == [holder / "runs" / "exp"], "one run folder, where the job started"
    assert any("sends it to the ranks that cannot see it" in output for output in outputs), outputs
    # The node that writes the run speaks for it, whichever global rank torchrun gave it after the restart.
    written = outputs[[folder for folder, _ in nodes].index(holder)]
    assert "results saved to" in written and f"epoch {epochs}/{epochs}" in written, written[-2000:]
    with open(holder / "runs" / "exp" / "results.csv") as handle:
        assert [int(row["epoch"]) for row in csv.DictReader(handle)] == list(range(epochs))
    assert TrainingCheckpoint.load(holder / "runs" / "exp" / "weights" / "last.pt").counters.epoch == epochs


def test_a_silent_node_ends_the_job_in_one_line_within_the_timeout(tmp_path):
    """A frozen node (node 1: its torchrun agent and worker stopped with SIGSTOP): the rank on node 0 ends within
    --dist-timeout and a margin, names the silent rank and the collective it waited in, and exits non-zero; the run's
    last.pt stays whole."""
    timeout = 12
    nodes = start_nodes(tmp_path, 10_000, 0, "--dist-timeout", str(timeout))
    holder = wait_for_last(nodes)
    (_, alive), (_, frozen) = nodes
    alive_worker, frozen_worker = worker_pid(alive, "LOCAL_RANK=0"), worker_pid(frozen, "LOCAL_RANK=0")
    alive_rank, frozen_rank = (environment_of(pid)["RANK"] for pid in (alive_worker, frozen_worker))
    try:
        for pid in (frozen.pid, frozen_worker):
            os.kill(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        while Path(f"/proc/{alive_worker}").exists() and "Z" not in Path(f"/proc/{alive_worker}/stat").read_text():
            assert time.monotonic() - stopped_at < timeout + 30, "the rank on the live node still waits"
            time.sleep(0.2)
    finally:
        for pid in (frozen.pid, frozen_worker):
            os.kill(pid, signal.SIGKILL)
        frozen.wait()
    output = alive.communicate(timeout=120)[0]
    assert alive.returncode != 0, output[-2000:]
    lines = [line for line in output.splitlines() if "(--dist-timeout)" in line]
    assert len(lines) == 1 and f"rank {frozen_rank} went silent" in lines[0], output[-3000:]
    assert lines[0].startswith(f"error: rank {alive_rank} waited {timeout} s (--dist-timeout) in "), lines[0]
    assert TrainingCheckpoint.load(holder / "runs" / "exp" / "weights" / "last.pt").counters.epoch >= 1
