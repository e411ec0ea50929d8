"""Real multi-process training under torchrun (gloo on the CPU): one run folder, identical replicas, the whole val
set scored once, a dead rank ends the job, and an elastic restart resumes by itself."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from detect.training.resume import TrainingCheckpoint
from tests.training.helpers import tiny_dataset, train_args, worker_pid

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny"))


def torchrun(args: list[str], max_restarts: int = 0) -> subprocess.Popen:
    """Two ranks of `python -m detect.train args` on this machine (a fresh rendezvous id each time)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "--max_restarts", str(max_restarts), "-m", "detect.train", *args]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ,
                            cwd=Path(__file__).resolve().parents[2])


def wait_for(path: Path, launcher: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.is_file():
        assert launcher.poll() is None, launcher.communicate()[0]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


ALL_ROW = re.compile(r"^\s+all\s+\d+(\s+[\d.]+){4}\s*$", re.MULTILINE)


def test_two_ranks_train_one_run_and_score_the_whole_val_set(data, tmp_path):
    launcher = torchrun(train_args(data, tmp_path, "--batch-size", "4"))
    output = launcher.communicate(timeout=600)[0]
    assert launcher.returncode == 0, output
    assert [path.name for path in tmp_path.iterdir()] == ["exp"], "rank 0 alone makes the run folder"
    assert "all 2 ranks hold identical parameters" in output
    assert "(8 images)" in output  # the final evaluation saw every val image once
    # One process scores the same weights exactly as the 2-rank job did (one thread each: the same arithmetic).
    best = tmp_path / "exp" / "weights" / "best.pt"
    single = subprocess.run(
        [sys.executable, "-m", "detect.val", "--weights", str(best), "--data", str(data), "--imgsz", "64",
         "--batch-size", "4", "--device", "cpu", "--workers", "0", "--project", str(tmp_path / "val"),
         "--no-progress"], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True)
    assert ALL_ROW.search(output).group(0) == ALL_ROW.search(single.stderr + single.stdout).group(0)


def test_a_dead_rank_ends_the_job_and_is_named(data, tmp_path):
    launcher = torchrun(train_args(data, tmp_path, "--noval", epochs=500))
    wait_for(tmp_path / "exp" / "weights" / "last.pt", launcher)
    os.kill(worker_pid(launcher, "RANK=1"), signal.SIGKILL)
    started = time.monotonic()
    output = launcher.communicate(timeout=120)[0]
    assert time.monotonic() - started < 60
    assert launcher.returncode != 0
    assert re.search(r"rank\s*:\s*1 \(local_rank: 1\)", output), output[-3000:]
    assert TrainingCheckpoint.load(tmp_path / "exp" / "weights" / "last.pt").counters.epoch >= 1


def test_an_elastic_restart_resumes_from_last_checkpoint(data, tmp_path):
    epochs = 8
    launcher = torchrun(train_args(data, tmp_path, "--noval", epochs=epochs), max_restarts=1)
    wait_for(tmp_path / "exp" / "weights" / "last.pt", launcher)
    os.kill(worker_pid(launcher, "RANK=1"), signal.SIGKILL)
    output = launcher.communicate(timeout=600)[0]
    assert launcher.returncode == 0, output[-3000:]
    assert "resuming from" in output
    assert [path.name for path in tmp_path.iterdir()] == ["exp"]
    with open(tmp_path / "exp" / "results.csv") as handle:
        epochs_logged = [int(row["epoch"]) for row in csv.DictReader(handle)]
    assert epochs_logged == list(range(epochs))  # the epoch cut short is logged once, after the restart
    assert TrainingCheckpoint.load(tmp_path / "exp" / "weights" / "last.pt").counters.epoch == epochs


def test_a_job_that_trains_twice_makes_two_runs_and_leaves_no_heartbeat_behind(data, tmp_path):
    out, project = tmp_path / "threads", tmp_path / "runs"
    out.mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(Path(__file__).with_name("train_twice.py")), str(out), str(data), str(project)]
    repo = Path(__file__).resolve().parents[2]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=repo, check=False,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)})
    assert finished.returncode == 0, (finished.stdout + finished.stderr)[-3000:]
    assert sorted(path.name for path in project.iterdir()) == ["exp", "exp2"]  # the second is a new run, not a resume
    for run in ("exp", "exp2"):
        assert TrainingCheckpoint.load(project / run / "weights" / "last.pt").counters.epoch == 1
    for rank in (0, 1):
        after_each = (out / f"rank{rank}.txt").read_text().splitlines()
        assert len(after_each) == 2 and not any("detect-heartbeat" in threads for threads in after_each), after_each
