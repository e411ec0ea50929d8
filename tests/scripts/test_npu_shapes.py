"""scripts/npu_shapes.py counts the distinct shapes an NPU meets in an epoch (training input, loss targets,
validation input, NMS buckets), here on the NPU stand-in: one training shape at a fixed size, at most the
multi-scale set's sizes, one validation shape per rectangular batch (the partial last batch one more)."""

from __future__ import annotations

import pytest
import torch

from detect.backend import npu
from tests.npu_standin import install
from tests.scripts.modules import script
from tests.training.helpers import tiny_dataset


@pytest.fixture
def npu_on_the_cpu(monkeypatch):
    """--device npu:0 gives the stand-in's NpuBackend, its tensors on the CPU, every op checked."""
    install(monkeypatch)
    original = npu.NpuBackend.__init__

    def on_cpu(self, index=0, **options):
        original(self, index, device=torch.device("cpu"), **options)

    monkeypatch.setattr(npu.NpuBackend, "__init__", on_cpu)


def counts(lines: list[str], run: str) -> dict[str, str]:
    """phase -> its line, in the block of `run`."""
    start = next(index for index, line in enumerate(lines) if line.startswith(run))
    return {" ".join(line.split()[:2]): line for line in lines[start + 1:start + 5]}


def number(line: str) -> int:
    return int(line.split()[2])


def test_one_epoch_fixed_and_multi_scale_on_the_standin(npu_on_the_cpu, tmp_path, capsys):
    data = tiny_dataset(tmp_path / "data")  # 8 images of 96 x 128
    assert script("npu_shapes").main(["--data", str(data), "--cfg", "yolov5n.yaml", "--imgsz", "64", "--batch-size",
                                      "3", "--device", "npu:0", "--workers", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    fixed, multi = counts(lines, "fixed size"), counts(lines, "--multi-scale")
    # drop_last: 2 batches of 3, one shape; targets padded to 128 rows
    assert number(fixed["train forward"]) == 1 and "(3, 3, 64, 64) x2" in fixed["train forward"]
    assert number(fixed["loss targets"]) == 1 and "(3, 128, 5) x2" in fixed["loss targets"]
    # validation batch 6: a rectangular 64 x 96 batch of 6 and the partial last one of 2 (the epoch's pass and the
    # final evaluation's), and the AMP check's one image at 64
    assert number(fixed["validation forward"]) == 3
    assert "(1, 3, 64, 64) x2, (2, 3, 64, 96) x2, (6, 3, 64, 96) x2" in fixed["validation forward"]
    assert 1 <= number(fixed["NMS buckets"]) <= 176 and "at most 176: multiples of 1024" in fixed["NMS buckets"]
    assert 1 <= number(multi["train forward"]) <= 2 and "at most 3: drop_last, sizes 32, 64, 96" in multi["train forward"]
    assert number(multi["validation forward"]) == 3


def test_nms_buckets_are_counted(npu_on_the_cpu):
    backend = npu.NpuBackend(0)
    with script("npu_shapes").counted_shapes() as shapes:
        for count in (5, 1024, 1025, 0):
            backend.nms(torch.rand(count, 4) * 100 + torch.tensor([0, 0, 100, 100]), torch.rand(count) + 0.01, 0.5)
    assert shapes["NMS buckets"] == {(1024, 4): 2, (2048, 4): 1}
