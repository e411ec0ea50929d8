"""Seeding, memory stats and the small device helpers on the CPU backend."""

import random

import numpy as np
import pytest
import torch

from detect.backend import MemoryStats, select
from detect.backend.cpu import CpuBackend
from detect.backend.cuda import CudaBackend
from detect.backend.npu import NpuBackend
from tests.npu_standin import npu_backend


def draws(backend, seed):
    backend.seed(seed)
    return random.random(), np.random.rand(4).tolist(), torch.rand(4).tolist(), torch.randint(0, 10**9, (1,)).item()


def test_same_seed_same_draws():
    backend = select("cpu")
    assert draws(backend, 123) == draws(backend, 123)


def test_different_seeds_differ():
    backend = select("cpu")
    first, second = draws(backend, 1), draws(backend, 2)
    assert all(a != b for a, b in zip(first, second))


def test_large_seed_accepted():
    backend = select("cpu")  # numpy takes 32-bit seeds only: a larger one must still seed every generator
    assert draws(backend, 2**40) == draws(backend, 2**40)
    assert all(a != b for a, b in zip(draws(backend, 2**40), draws(backend, 2**40 + 1)))


@pytest.mark.parametrize("cls, name", [(CpuBackend, "gloo"), (CudaBackend, "nccl"), (NpuBackend, "hccl")])
def test_distributed_backend_names(cls, name):
    assert cls.distributed_backend == name


def test_memory_stats_cpu():
    backend = select("cpu")
    backend.reset_peak_memory()
    stats = backend.memory_stats()
    assert isinstance(stats, MemoryStats)
    assert 0 < stats.current_bytes <= stats.peak_bytes


def test_helpers_run_on_cpu():
    backend = select("cpu")
    backend.set_device()
    backend.synchronize()
    backend.empty_cache()
    tensor = torch.ones(3)
    assert backend.to_device(tensor).device == torch.device("cpu")
    assert backend.to_device(tensor, non_blocking=False).device == torch.device("cpu")


def test_cpu_has_no_device_generator_and_prefers_channels_last():
    backend = select("cpu")
    assert backend.rng_state() is None
    backend.set_rng_state(None)
    assert backend.channels_last


def test_accelerator_generator_state_round_trip(monkeypatch):
    backend = npu_backend(monkeypatch)
    state = backend.rng_state()
    backend.set_rng_state(state)
    calls = [(name, args) for name, args, _ in backend.torch_npu.calls if name.endswith("rng_state")]
    assert calls == [("get_rng_state", (backend.device,)), ("set_rng_state", (state, backend.device))]
