"""Host placement (--cpu-affinity): disjoint core shares per local rank, NUMA-local where the topology is known, read
from /sys or npu-smi; and at 2 real ranks, each rank's loader workers run on its own cores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from detect.backend.placement import cuda_local_cores, even_share, npu_local_cores, parse_cores, plan_cores
from detect.errors import UserError
from detect.training.settings import TrainSettings
from tests.training.helpers import tiny_dataset, train_args, worker_pid

# What `npu-smi info -t topo` prints on an 8-card machine, laid out as nvidia-smi's topology table (a stand-in).
NPU_TOPOLOGY = """\
           NPU0       NPU1       NPU2       NPU3       NPU4       NPU5       NPU6       NPU7       CPU Affinity
NPU0       X          HCCS       HCCS       HCCS       SYS        SYS        SYS        SYS        0-23
NPU1       HCCS       X          HCCS       HCCS       SYS        SYS        SYS        SYS        24-47
NPU4       SYS        SYS        SYS        SYS        X          HCCS       HCCS       HCCS       96-119
"""


def test_core_lists_parse_and_bad_ones_are_one_line():
    assert parse_cores("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    with pytest.raises(UserError, match="not a core list"):
        parse_cores("0-3;8")
    with pytest.raises(UserError, match="--cpu-affinity"):
        TrainSettings(cpu_affinity="0-3:four")


def test_even_shares_are_disjoint_and_cover_the_cores():
    cores = list(range(10))
    shares = [even_share(cores, 4, position) for position in range(4)]
    assert shares == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert [even_share([0, 1], 3, position) for position in range(3)] == [[0], [1], [0]]  # fewer cores than ranks


def test_ranks_share_the_cores_of_their_devices_numa_node():
    numa = {0: set(range(8)), 1: set(range(8)), 2: set(range(8, 16)), 3: set(range(8, 16))}
    plans = [plan_cores(list(range(16)), [0, 1, 2, 3], numa.get, rank) for rank in range(4)]
    assert plans == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    # a device of unknown topology: an even split of what this process may use
    assert plan_cores([0, 1, 2, 3], [0, 9], numa.get, 1) == [2, 3]


def test_topology_from_sys_and_npu_smi(tmp_path):
    device = tmp_path / "0000:3b:00.0"
    device.mkdir()
    (device / "local_cpulist").write_text("0-23,96-119\n")
    assert cuda_local_cores("0000:3B:00.0", tmp_path) == set(range(24)) | set(range(96, 120))
    assert cuda_local_cores("0000:5e:00.0", tmp_path) is None
    assert npu_local_cores(1, NPU_TOPOLOGY) == set(range(24, 48))
    assert npu_local_cores(4, NPU_TOPOLOGY) == set(range(96, 120))
    assert npu_local_cores(2, NPU_TOPOLOGY) is None and npu_local_cores(0, "no table here") is None


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to give two ranks one each")
def test_two_ranks_and_their_loader_workers_run_on_disjoint_cores(tmp_path):
    first, second = sorted(os.sched_getaffinity(0))[:2]
    data = tiny_dataset(tmp_path / "data")
    args = train_args(data, tmp_path, "--noval", "--workers", "1", "--cpu-affinity", f"{first}:{second}",
                      epochs=1000)
    launcher = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                 "2", "-m", "detect.train", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    ranks = []
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "exp" / "weights" / "last.pt").is_file():  # the loaders' workers are running
            assert launcher.poll() is None and time.monotonic() < deadline, launcher.communicate()[0][-2000:]
            time.sleep(0.2)
        placed = {}
        for rank in (0, 1):
            pid = worker_pid(launcher, f"RANK={rank}")
            ranks.append(pid)
            children = [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
            assert children, f"rank {rank} has no loader worker"
            placed[rank] = {core for process in (pid, *children) for core in os.sched_getaffinity(process)}
    finally:
        for pid in (launcher.pid, *ranks):  # torchrun starts each rank in a session of its own
            os.kill(pid, signal.SIGKILL)
        launcher.wait()
    assert placed == {0: {first}, 1: {second}}
