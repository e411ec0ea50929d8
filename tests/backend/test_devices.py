"""--device as yolov5 users write it: bare accelerator indices (0, 0,1,2,3), and which device a rank takes."""

from __future__ import annotations

import pytest
import torch

from detect import backend as backends
from detect.backend import BackendUnavailable, DeviceRequest, parse_devices
from detect.backend import npu as npu_module
from detect.errors import UserError
from detect.training.distributed import DistContext
from detect.training.settings import TrainSettings
from detect.training.setup.recipe import precision_request
from tests import npu_standin


@pytest.mark.parametrize("spec, request_", [
    ("0", DeviceRequest("accelerator", (0,))), ("0,1,2,3", DeviceRequest("accelerator", (0, 1, 2, 3))),
    ("npu:4,5", DeviceRequest("npu", (4, 5))), ("cuda:1", DeviceRequest("cuda", (1,))),
    ("cpu", DeviceRequest("cpu", (0,))), (" AUTO ", DeviceRequest("auto", (0,))),
])
def test_parse_devices(spec, request_):
    assert parse_devices(spec) == request_


@pytest.mark.parametrize("spec", ["0,", ",1", "0,0", "cpu:0,1", "0;1", "gpu0"])
def test_bad_device_lists_are_one_line(spec):
    with pytest.raises(UserError, match=f"device '{spec}'"):
        parse_devices(spec)


@pytest.fixture
def no_accelerators(monkeypatch):
    monkeypatch.setattr(npu_module, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_an_index_without_an_accelerator_suggests_the_cpu(no_accelerators):
    with pytest.raises(BackendUnavailable) as caught:
        backends.select("0")
    assert str(caught.value) == ("--device with an index names an accelerator, but this machine has neither a "
                                 "working NPU (torch_npu) nor a CUDA GPU; use --device cpu")


@pytest.fixture
def two_npus(monkeypatch):
    """Two stand-in NPUs; every NpuBackend made lives on the CPU, and records the index it was given."""
    npu_standin.install(monkeypatch).npu.device_count = lambda: 2
    made = []
    original = npu_module.NpuBackend.__init__

    def on_cpu(self, index=0, **options):
        made.append(index)
        original(self, index, device=torch.device("cpu"), **options)

    monkeypatch.setattr(npu_module.NpuBackend, "__init__", on_cpu)
    return made


def test_an_index_names_the_npu_when_torch_npu_works(two_npus):
    assert backends.select("1").name == "npu" and two_npus == [1]
    assert backends.select("0,1").name == "npu" and two_npus[-1] == 0  # one process takes the list's first


def test_a_torchrun_rank_takes_the_device_at_its_local_rank_in_the_list(two_npus):
    settings = TrainSettings(device="1,0")
    for local_rank, expected in ((0, 1), (1, 0)):
        precision_request(settings, DistContext(rank=local_rank, world_size=2, local_rank=local_rank)).backend()
        assert two_npus[-1] == expected
    # one index under torchrun: the accelerator at LOCAL_RANK, as before (and as yolov5)
    precision_request(TrainSettings(device="0"), DistContext(rank=1, world_size=2, local_rank=1)).backend()
    assert two_npus[-1] == 1


def test_a_list_shorter_than_the_node_is_one_line(two_npus):
    with pytest.raises(UserError, match="--device lists 2 device"):
        precision_request(TrainSettings(device="0,1"), DistContext(rank=2, world_size=3, local_rank=2))
