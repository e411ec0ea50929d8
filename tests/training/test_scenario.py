"""The features a team turns on, together, as it runs them: a 2-rank torchrun job (gloo) tracked in MLflow through
MLFLOW_TRACKING_URI on a SQLite store, on a read-only dataset, gets SIGTERM in every process while epoch 1 validates;
the resume command it prints, run under torchrun at 2 ranks, trains to the end. MLflow then holds one run with every
epoch's metrics, the label cache was written once (in the user cache: the dataset is read-only) and the dataset is
untouched."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from detect.training.resume import TrainingCheckpoint
from tests.training.helpers import tagged_processes, tiny_dataset, train_args

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow", reason="MLflow is optional (pip install 'detect-trainer[mlflow]')")
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 3


def _until(condition, process: subprocess.Popen, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.1)


def _runs(uri: str, experiment: str) -> list:
    found = MlflowClient(tracking_uri=uri).get_experiment_by_name(experiment)
    return MlflowClient(tracking_uri=uri).search_runs([found.experiment_id]) if found else []


def _a_run_is_stored(database: Path) -> bool:
    """Whether MLflow's SQLite store holds a run, read without MLflow (whose client would set the store up too)."""
    if not database.is_file():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1)) as connection:
            return connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0] > 0
    except sqlite3.Error:  # the tables are still being made
        return False


def _read_only(root: Path, writable: bool) -> None:
    for folder in [root, *(path for path in root.rglob("*") if path.is_dir())]:
        folder.chmod(0o755 if writable else 0o555)  # no write bits: read-only even for root


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(path): (path.stat().st_ino, path.stat().st_mtime_ns) for path in folder.rglob("*") if path.is_file()}


def test_tracked_two_rank_job_on_read_only_data_stopped_in_validation_resumes_to_one_run(tmp_path):
    data, project, uri = tiny_dataset(tmp_path / "data", count=16), tmp_path / "runs", f"sqlite:///{tmp_path}/ml.db"
    dataset_files = _files(tmp_path / "data")
    tag, marker, go = uuid.uuid4().hex, tmp_path / "validating", tmp_path / "go"
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO),
               "MLFLOW_TRACKING_URI": uri, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "DETECT_TEST_JOB": tag}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    _read_only(tmp_path / "data", writable=False)
    try:
        job = subprocess.Popen(
            [*torchrun, str(REPO / "tests/training/slowed_train.py"), *train_args(data, project, epochs=EPOCHS)],
            env={**environ, "SLOWED": "validation", "SLOWED_SECONDS": "1", "MARKER": str(marker), "HOLD": str(go)},
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        _until(marker.exists, job, "epoch 1's validation")
        # MLflow's run is made by the writing rank's tracking thread; a real first epoch is long enough for it.
        _until(lambda: _a_run_is_stored(tmp_path / "ml.db"), job, "the MLflow run")
        go.touch()
        time.sleep(0.3)
        cache = _files(tmp_path / "xdg")
        sent = time.monotonic()
        for pid in tagged_processes(tag):
            os.kill(pid, signal.SIGTERM)
        stopped = job.communicate(timeout=120)[0]
        assert time.monotonic() - sent < 7, stopped[-3000:]  # one slowed batch (1 s), the stop, torchrun's end
        (line,) = [line for line in stopped.splitlines() if "resume with:" in line]
        assert line == f"stopped in epoch 1's validation; resume with: python -m detect.train --resume {project / 'exp'}"
        command = shlex.split(line.split("resume with: ", 1)[1])
        assert command[:3] == ["python", "-m", "detect.train"]
        resumed = subprocess.run([*torchrun, "-m", "detect.train", *command[3:]], env=environ, cwd=tmp_path,
                                 capture_output=True, text=True, timeout=600, check=False)
    finally:
        _read_only(tmp_path / "data", writable=True)
        for pid in tagged_processes(tag):  # a failed check above leaves no process of the job behind
            os.kill(pid, signal.SIGKILL)
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output[-3000:]
    assert "resuming from" in output and "train labels: cache loaded on ranks 0, 1" in output, output[-3000:]
    assert TrainingCheckpoint.load(project / "exp" / "weights" / "last.pt").counters.epoch == EPOCHS
    (run,) = _runs(uri, str(project))
    assert run.info.status == "FINISHED"
    client = MlflowClient(tracking_uri=uri)
    for metric in ("train/box_loss", "metrics/mAP_0.5:0.95"):
        assert sorted(point.step for point in client.get_metric_history(run.info.run_id, metric)) == [0, 1, 2]
    assert _files(tmp_path / "xdg") == cache  # the label cache was written once, by the first start
    assert any(path.endswith(".detect.cache") for path in cache)
    assert _files(tmp_path / "data") == dataset_files
