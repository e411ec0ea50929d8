"""`python -m detect.train --device 0,1` outside torchrun: one rank per device through torch's elastic launcher.

The machine has no accelerator, so the ranks run on the NPU stand-in (tests/npu_standin.py) reporting two NPUs, its
backend placed on the CPU with gloo by a sitecustomize module that every process of the job loads: a contract test of
our launch and device placement, not of the hardware.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.helpers import tiny_dataset, train_args
from tests.user_run import run_cli

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

# Loaded at start-up by every interpreter of the job (launcher and ranks): two stand-in NPUs, backed by the CPU.
STANDIN_SITE = """
import os, sys
import torch
from tests.npu_standin import enforce, make_torch_npu
sys.modules["torch_npu"] = make_torch_npu(device_count=2)
import detect.backend.npu as npu
original_init = npu.NpuBackend.__init__

def on_cpu(self, index=0, **options):
    rank = os.environ.get("LOCAL_RANK")
    if rank is not None and rank == os.environ.get("FAIL_LOCAL_RANK"):
        raise SystemExit(f"rank {rank} fails on purpose")
    if index >= sys.modules["torch_npu"].npu.device_count():  # the real path: its own "only N visible" error
        original_init(self, index, **options)
    original_init(self, index, device=torch.device("cpu"), **options)
    enforce(sys.modules["torch_npu"])  # a rank's every op from here checked as torch_npu would
    with open(os.environ["DEVICE_LOG"], "a") as log:
        log.write(f"{rank} {index}\\n")

npu.NpuBackend.__init__ = on_cpu
npu.NpuBackend.distributed_backend = "gloo"
"""


@pytest.fixture
def standin_job(tmp_path):
    """The environment of a job on two stand-in NPUs; its DEVICE_LOG collects 'LOCAL_RANK index' per backend made."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STANDIN_SITE)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1",
            "DEVICE_LOG": str(tmp_path / "devices.log"), "PYTHONUNBUFFERED": "1"}


def train(environ: dict, argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "detect.train", *argv], env=environ, cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)


def test_device_list_without_torchrun_trains_one_rank_per_device(standin_job, tmp_path):
    data = tiny_dataset(tmp_path / "data")
    argv = train_args(data, tmp_path / "runs", "--no-amp", epochs=1)
    argv[argv.index("--device") + 1] = "0,1"
    finished = train(standin_job, argv)
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, output
    assert "starting 2 ranks, one per device of --device 0,1" in output
    ranks = sorted(line for line in Path(standin_job["DEVICE_LOG"]).read_text().splitlines()
                   if not line.startswith("None"))
    assert ranks == ["0 0", "1 1"], ranks  # each rank on the device at its LOCAL_RANK in the list
    assert "all 2 ranks hold identical parameters" in output
    assert (tmp_path / "runs" / "exp" / "weights" / "best.pt").is_file()


def test_a_rank_that_fails_ends_the_job_with_one_line_naming_it(standin_job, tmp_path):
    data = tiny_dataset(tmp_path / "data")
    argv = train_args(data, tmp_path / "runs", "--no-amp", epochs=1)
    argv[argv.index("--device") + 1] = "0,1"
    finished = train({**standin_job, "FAIL_LOCAL_RANK": "1"}, argv)
    assert finished.returncode == 2, finished.stdout + finished.stderr
    last = finished.stderr.strip().splitlines()[-1]
    assert last in ("error: the 2-rank job failed: rank 1 exited with code 1; the launcher stopped rank 0",
                    "error: the 2-rank job failed: rank 1 exited with code 1"), finished.stderr


def test_a_device_list_beyond_the_visible_devices_stops_before_any_rank_starts(standin_job, tmp_path):
    project = tmp_path / "runs"
    finished = train(standin_job, ["--cfg", "yolov5n.yaml", "--device", "0,2", "--project", str(project)])
    assert finished.returncode == 2
    assert finished.stderr.strip() == "error: npu:2 was asked for but only 2 NPU(s) are visible"
    assert not project.exists()


def test_ranks_that_fail_at_once_print_each_their_own_line(tmp_path):
    # two torchrun ranks that stop on the same bad flag at the same moment, their stderr one unbuffered stream
    finished = run_cli("torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "detect.train",
                       "--cfg", "yolov5n.yaml", "--data", str(tmp_path / "missing.yaml"), "--device", "cpu",
                       timeout=300, merge_output=True)
    assert finished.returncode != 0
    errors = [line for line in finished.stdout.splitlines() if "error:" in line]
    assert errors == [f"error: {tmp_path / 'missing.yaml'}: file not found"] * 2, finished.stdout[-3000:]
