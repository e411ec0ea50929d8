"""Host placement: each rank of a node and its loader workers on a range of the host's cores of their own, NUMA-local
to the rank's device where the topology is known, an even split otherwise (Huawei's 8-card runs give each rank 24 of
an Atlas 800's 192 Kunpeng cores; left to the OS, the loader workers of different ranks fight over cores).

The topology comes from /sys for PCI devices (CUDA: the device's local_cpulist) and from `npu-smi info -t topo`'s
"CPU Affinity" column where npu-smi is installed (read as nvidia-smi's topology table is laid out; not checked on an
Atlas machine here)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from detect.errors import UserError, short_repr

AFFINITY_HELP = ("host cores for each rank and its loader workers: auto (on NPU and CUDA a disjoint share, NUMA-local "
                 "to the device where the topology is known), none, or one core list per local rank, split by ':' "
                 "(0-23:24-47)")
CORE_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
PCI_DEVICES = Path("/sys/bus/pci/devices")


def parse_cores(text: str) -> list[int]:
    """A Linux core list ("0-3,8") as sorted core numbers; a bad one is a UserError."""
    if not CORE_LIST.match(text.strip()):
        raise UserError(f"--cpu-affinity: {short_repr(text)} is not a core list such as 0-23 or 0-3,8")
    cores = set()
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        cores.update(range(int(first), int(last or first) + 1))
    return sorted(cores)


def check_affinity(spec: str) -> None:
    """--cpu-affinity is auto, none or core lists split by ':' (checked before any work)."""
    if spec not in ("auto", "none"):
        for part in spec.split(":"):
            parse_cores(part)


def even_share(cores: Sequence[int], count: int, position: int) -> list[int]:
    """The `position`-th of `count` contiguous, disjoint shares of `cores` (the first ones one core larger when the
    cores do not divide evenly); every share holds a core, shared round-robin when there are fewer cores than
    ranks."""
    if len(cores) < count:
        return [cores[position % len(cores)]]
    size, extra = divmod(len(cores), count)
    start = position * size + min(position, extra)
    return list(cores[start:start + size + (position < extra)])


def plan_cores(available: Sequence[int], device_of_rank: Sequence[int],
               local_cores: Callable[[int], set[int] | None], local_rank: int) -> list[int]:
    """This local rank's cores: the cores NUMA-local to its device (as far as `available`), shared evenly among the
    local ranks whose devices are local to the same cores; an even share of `available` when the topology is not
    known for every device."""
    near = {rank: local_cores(device) for rank, device in enumerate(device_of_rank)}
    if any(cores is None or not cores & set(available) for cores in near.values()):
        return even_share(available, len(device_of_rank), local_rank)
    mine = near[local_rank]
    neighbours = [rank for rank, cores in near.items() if cores == mine]
    return even_share(sorted(mine & set(available)), len(neighbours), neighbours.index(local_rank))


def cuda_local_cores(pci_bus_id: str, devices: Path = PCI_DEVICES) -> set[int] | None:
    """The cores /sys names local to the PCI device `pci_bus_id` (torch's 0000:3B:00.0 form), if it says."""
    path = devices / pci_bus_id.lower() / "local_cpulist"
    try:
        return set(parse_cores(path.read_text().strip()))
    except (OSError, UserError):
        return None


def npu_local_cores(index: int, topology: str | None = None) -> set[int] | None:
    """NPU `index`'s "CPU Affinity" cores in `npu-smi info -t topo`'s table (run here when `topology` is None)."""
    if topology is None:
        if shutil.which("npu-smi") is None:
            return None
        try:
            topology = subprocess.run(["npu-smi", "info", "-t", "topo"], capture_output=True, text=True,
                                      timeout=30, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    if "CPU Affinity" not in topology:
        return None
    for line in topology.splitlines():
        fields = line.split()
        if fields and fields[0] == f"NPU{index}" and CORE_LIST.match(fields[-1]):
            return set(parse_cores(fields[-1]))
    return None


def available_cores() -> list[int]:
    """The cores this process may run on (its affinity as launched: taskset, cgroups)."""
    return sorted(os.sched_getaffinity(0))


def pin(cores: Sequence[int]) -> None:
    """Run this process, the threads it starts and the processes it forks (loader workers) on `cores`, with no more
    of torch's threads than cores."""
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(min(torch.get_num_threads(), len(cores)))
