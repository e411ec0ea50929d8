"""A tracked run stopped at any second, as a user runs it (the command, a time limit, a memory cap), and resumed with
the command it prints: the resumed run continues the same MLflow run, which ends with every epoch.

- a 2-rank torchrun job (gloo) on a loaded machine (two busy processes keep both cores busy), on read-only data, on a
  SQLite store that this job makes (its first use builds the schema: seconds), gets SIGTERM as soon as epoch 1
  validates, whatever MLflow is doing then: it ends within 5 s;
- a run whose tracking server freezes (SIGSTOP) gets SIGTERM: it waits 1 s for the server, names what it drops;
- a run stopped while MLflow builds a new SQLite store leaves no half-built store behind (MLflow's own set-up, cut
  short, left a file that no MLflow opens again)."""

from __future__ import annotations

import os
import resource
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from detect.training.resume import TrainingCheckpoint
from tests.tracking.server import mlflow_server
from tests.training.helpers import tagged_processes, tiny_dataset, train_args

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow", reason="MLflow is optional (pip install 'detect-trainer[mlflow]')")
from mlflow.tracking import MlflowClient

from detect.tracking import KEY_TAG, RUN_KEY

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 2
STOP_WITHIN_S = 5.0  # issue 50's goal, torchrun's own exit included (2-3 s of it on the loaded 2-core machine)
MEMORY_GB = 4  # each process of the job (RLIMIT_DATA, as tests/user_run.py caps a CLI)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_GB * 2**30, MEMORY_GB * 2**30))


def _environ(tmp_path: Path, uri: str, tag: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO),
            "MLFLOW_TRACKING_URI": uri, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "DETECT_TEST_JOB": tag, **extra}


def _slowed(command: list[str], args: list[str], environ: dict[str, str], cwd: Path) -> subprocess.Popen:
    """`command` (a Python, or torchrun) running tests/training/slowed_train.py `args`, with the memory cap."""
    return subprocess.Popen([*command, str(REPO / "tests/training/slowed_train.py"), *args], env=environ, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_capped)  # noqa: PLW1509 - the test starts no thread before


def _stop(job: subprocess.Popen) -> tuple[str, float]:
    """SIGTERM to `job`; its output and how long it took to end."""
    sent = time.monotonic()
    job.send_signal(signal.SIGTERM)
    output = job.communicate(timeout=60)[0]
    return output, time.monotonic() - sent


def _resumed(line: str, command: list[str], environ: dict[str, str], cwd: Path) -> str:
    """The output of the resume command that the stopped run printed in `line`, run with `command` (a Python or
    torchrun), which ends well."""
    args = shlex.split(line.split("resume with: ", 1)[1])
    assert args[:3] == ["python", "-m", "detect.train"], line
    resumed = subprocess.run([*command, "-m", "detect.train", *args[3:]], env=environ, cwd=cwd, capture_output=True,
                             text=True, timeout=300, check=False, preexec_fn=_capped)
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0 and "Traceback" not in output, output[-3000:]
    return output


def _one_run_with_every_epoch(uri: str, project: Path, epochs: int):
    """The one MLflow run of `project`, finished, with each epoch's loss and mAP once."""
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name(str(project)).experiment_id])
    assert run.info.status == "FINISHED", run.info
    for metric in ("train/box_loss", "metrics/mAP_0.5:0.95"):
        steps = sorted(point.step for point in client.get_metric_history(run.info.run_id, metric))
        assert steps == list(range(epochs)), (metric, steps)
    return run


def _read_only(root: Path, writable: bool) -> None:
    for folder in [root, *(path for path in root.rglob("*") if path.is_dir())]:
        folder.chmod(0o755 if writable else 0o555)  # no write bits: read-only even for root


def _until(condition, process: subprocess.Popen, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.02)


def _tracebacks_are_torchrun_s(output: str) -> bool:
    """Whether every traceback in `output` is torchrun's own for the signal it got (docs/scale.md, "Many nodes and
    preemption"): the ranks print none."""
    blocks = output.split("Traceback (most recent call last):")[1:]
    return all("SignalException: Process" in block and "got signal: 15" in block for block in blocks)


def test_sigterm_in_validation_of_a_loaded_tracked_job_ends_within_5_s_and_resumes_one_mlflow_run(tmp_path):
    data, project = tiny_dataset(tmp_path / "data", count=16), tmp_path / "runs"
    uri, marker, tag = f"sqlite:///{tmp_path}/mlflow.db", tmp_path / "validating", uuid.uuid4().hex
    environ = _environ(tmp_path, uri, tag)
    _read_only(tmp_path / "data", writable=False)
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        job = _slowed(TORCHRUN, train_args(data, project, epochs=EPOCHS), {
            **environ, "SLOWED": "validation", "SLOWED_SECONDS": "0.25", "MARKER": str(marker)}, tmp_path)
        _until(marker.exists, job, "epoch 1's validation")
        stopped, seconds = _stop(job)
    finally:
        for process in load:
            process.kill()
        _read_only(tmp_path / "data", writable=True)
        for pid in tagged_processes(tag):  # a failed check above leaves no process of the job behind
            os.kill(pid, signal.SIGKILL)
    print(f"the job ended {seconds:.1f} s after SIGTERM")  # the figure of docs/scale.md (pytest -rP shows it)
    assert seconds < STOP_WITHIN_S, (seconds, stopped[-3000:])
    assert _tracebacks_are_torchrun_s(stopped), stopped[-5000:]
    (line,) = [line for line in stopped.splitlines() if "resume with:" in line]
    assert line == f"stopped in epoch 1's validation; resume with: python -m detect.train --resume {project / 'exp'}"
    assert len([line for line in stopped.splitlines() if line.startswith("MLflow: unsent")]) <= 1, stopped[-3000:]
    last = TrainingCheckpoint.load(project / "exp" / "weights" / "last.pt")
    assert last.counters.epoch == 0 and RUN_KEY in last.tracking  # our key from the first save, MLflow or not
    assert not (project / "exp" / "results.png").exists()  # left to the resumed run: 1.2-3.2 s of the stop
    _resumed(line, TORCHRUN, environ, tmp_path)
    assert (project / "exp" / "results.png").is_file()
    run = _one_run_with_every_epoch(uri, project, EPOCHS)
    assert run.data.tags[KEY_TAG] == last.tracking[RUN_KEY]


def test_sigterm_with_the_tracking_server_frozen_waits_1_s_for_it_and_names_what_it_drops(tmp_path):
    data, project, marker, hold = tiny_dataset(tmp_path / "data", count=16), tmp_path / "runs", tmp_path / "m", \
        tmp_path / "go"
    with mlflow_server(tmp_path) as (uri, server):
        client, environ = MlflowClient(tracking_uri=uri), _environ(tmp_path, uri, uuid.uuid4().hex)

        def epoch_1_sent() -> bool:
            experiment = client.get_experiment_by_name(str(project))
            runs = client.search_runs([experiment.experiment_id]) if experiment else []
            return bool(runs and client.get_metric_history(runs[0].info.run_id, "train/box_loss"))

        job = _slowed([sys.executable], train_args(data, project, epochs=3), {
            **environ, "SLOWED": "validation", "SLOWED_PASS": "2", "SLOWED_SECONDS": "0.5", "MARKER": str(marker),
            "HOLD": str(hold)}, tmp_path)
        try:
            _until(marker.exists, job, "epoch 2's validation")  # held there until the server has epoch 1
            _until(epoch_1_sent, job, "epoch 1's metrics on the server")
            os.killpg(server.pid, signal.SIGSTOP)
            hold.touch()
            stopped, seconds = _stop(job)
        finally:
            os.killpg(server.pid, signal.SIGCONT)
            job.kill()
        assert job.returncode == 143 and seconds < STOP_WITHIN_S, (seconds, stopped[-3000:])
        assert "Traceback" not in stopped, stopped[-3000:]
        (warning,) = [line for line in stopped.splitlines() if line.startswith("MLflow")][-1:]
        assert warning.startswith("MLflow: unsent after 1 s, dropped: ") and warning.endswith(
            "the status KILLED; a resumed run sends the epochs' metrics that MLflow lacks"), warning
        assert stopped.strip().splitlines()[-1].startswith("stopped in epoch 2's validation; resume with: ")
        assert not (project / "exp" / "results.png").exists()  # left to the resumed run
        _resumed(stopped.strip().splitlines()[-1], [sys.executable], environ, tmp_path)
        _one_run_with_every_epoch(uri, project, 3)


def test_a_stop_while_mlflow_builds_a_new_sqlite_store_leaves_no_half_built_store(tmp_path):
    data, project, store = tiny_dataset(tmp_path / "data", count=16), tmp_path / "runs", tmp_path / "mlflow.db"
    environ = _environ(tmp_path, f"sqlite:///{store}", uuid.uuid4().hex)
    job = _slowed([sys.executable], train_args(data, project, epochs=3), {
        **environ, "SLOWED": "validation", "SLOWED_SECONDS": "1"}, tmp_path)
    try:
        _until(lambda: any(tmp_path.glob(".mlflow.db.*.new")), job, "MLflow's set-up of the store")
        time.sleep(0.5)  # inside it (5-7 s on the 2-core machine)
        stopped, seconds = _stop(job)
    finally:
        job.kill()
    assert job.returncode == 143 and seconds < STOP_WITHIN_S and "Traceback" not in stopped, stopped[-3000:]
    # MLflow's own set-up names the store at once: cut short at 8 of 30 moments tried (every 0.2 s of it), it left
    # a store no MLflow opens ("duplicate column name", "table ... already exists", "out-of-date database schema").
    # Cut short now, it leaves its draft alone; on a quiet machine it may end while the process exits, and then the
    # store it named is whole: the resumed run below opens it either way.
    assert store.exists() or len(list(tmp_path.glob(".mlflow.db.*.new"))) == 1
    _resumed(stopped.strip().splitlines()[-1], [sys.executable], environ, tmp_path)
    assert not list(tmp_path.glob(".mlflow.db.*"))  # the abandoned draft removed
    _one_run_with_every_epoch(f"sqlite:///{store}", project, 3)
