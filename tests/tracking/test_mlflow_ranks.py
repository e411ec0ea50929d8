"""MLflow at 2 ranks under torchrun (gloo on the CPU): one MLflow run of the job, tracked by the rank that writes the
run, continued after an elastic restart; the other rank never imports MLflow nor makes its store (which crashed the
job before: both ranks set up the same SQLite store at once)."""

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

pytest.importorskip("mlflow", reason="MLflow is optional (pip install 'detect-trainer[mlflow]')")
from mlflow.tracking import MlflowClient

from detect.tracking import KEY_TAG, RUN_ID, RUN_KEY
from detect.training.results_log import COLUMNS

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
# Each worker of the job notes, in IMPORT_LOG/rank<RANK>, whether it imported MLflow or made a ./mlruns folder; with
# HOLD_FIRST_ATTEMPT, the job's first attempt waits at its second epoch's save, to be killed.
WATCH_SITE = """
import os, sys, time
if os.environ.get("RANK") is not None:
    seen = set()

    def watch(event, args):
        if event == "import" and str(args[0]).split(".")[0] == "mlflow":
            what = "import-mlflow"
        elif event == "os.mkdir" and os.path.basename(os.fsdecode(args[0])) == "mlruns":
            what = "mkdir-mlruns"
        else:
            return
        if what not in seen:
            seen.add(what)
            with open(os.path.join(os.environ["IMPORT_LOG"], "rank" + os.environ["RANK"]), "a") as log:
                log.write(what + "\\n")

    sys.addaudithook(watch)

if os.environ.get("RANK") is not None and os.environ.get("HOLD_FIRST_ATTEMPT"):
    from detect.training import hooks

    save = hooks.Checkpointer.after_epoch

    def held(self, run, epoch, row):
        deadline = time.monotonic() + 60
        if epoch > 0 and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
            # the first attempt waits here for the test's kill, however loaded the machine, until torchrun stops it
            while not run.control.stop_asked() and time.monotonic() < deadline:
                time.sleep(0.05)
        save(self, run, epoch, row)

    hooks.Checkpointer.after_epoch = held
"""
ALL_ROW = re.compile(r"^\s+all\s+\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+([\d.]+)\s*$", re.MULTILINE)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny"))


def _torchrun(args: list[str], tmp_path: Path, cwd: Path, max_restarts: int = 0,
              **environ: str) -> subprocess.Popen:
    """Two ranks of `python -m detect.train args` in `cwd`, each noting what it does in tmp_path/imports (WATCH_SITE)."""
    site = tmp_path / "site"
    site.mkdir()
    (tmp_path / "imports").mkdir()
    (site / "sitecustomize.py").write_text(WATCH_SITE)
    base = {key: value for key, value in os.environ.items() if key != "MLFLOW_TRACKING_URI"}
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "--max_restarts",
         str(max_restarts), "-m", "detect.train", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**base, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "IMPORT_LOG": str(tmp_path / "imports"),
                        "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), **environ})


def _finished(launcher: subprocess.Popen, tmp_path: Path) -> tuple[str, dict[int, set[str]]]:
    """The job's output once it ended well, and what each rank noted."""
    output = launcher.communicate(timeout=600)[0]
    assert launcher.returncode == 0 and "Traceback" not in output, output[-5000:]
    log = tmp_path / "imports"
    return output, {rank: set((log / f"rank{rank}").read_text().split()) if (log / f"rank{rank}").is_file() else set()
                    for rank in (0, 1)}


def _the_run(uri: str, project: Path, output: str):
    """The job's one MLflow run, finished, made with one line and no warning."""
    assert [line for line in output.splitlines() if line.startswith("MLflow")] == [
        f"MLflow: run exp of experiment '{project}' at {uri}"], output[-5000:]
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name(str(project)).experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED", runs
    return client, runs[0]


def _val_of_last(data: Path, last: Path, tmp_path: Path) -> tuple[float, float]:
    """mAP@0.5 and mAP@0.5:0.95 of `last` (its EMA weights) by `python -m detect.val` in one process."""
    finished = subprocess.run(
        [sys.executable, "-m", "detect.val", "--weights", str(last), "--data", str(data), "--imgsz", "64",
         "--batch-size", "4", "--device", "cpu", "--workers", "0", "--project", str(tmp_path / "val"),
         "--no-progress"], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True)
    row = ALL_ROW.search(finished.stderr + finished.stdout)
    return float(row.group(1)), float(row.group(2))


def test_two_ranks_track_one_run_from_the_writing_rank(data, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    project = tmp_path / "runs"
    # In tmp_path: MLflow puts the artifacts of a SQLite store's new experiment in ./mlruns.
    output, noted = _finished(_torchrun(train_args(data, project), tmp_path, tmp_path, MLFLOW_TRACKING_URI=uri),
                              tmp_path)
    assert noted == {0: {"import-mlflow", "mkdir-mlruns"}, 1: set()}, noted
    client, run = _the_run(uri, project, output)
    with open(project / "exp" / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == COLUMNS and len(rows) == 2
    assert all(row["train/grad_norm_mean"] and row["train/nonfinite_loss_steps"] == "0" for row in rows)
    for column in COLUMNS[1:]:  # every value of results.csv, read back from MLflow at its epoch
        logged = {metric.step: metric.value for metric in client.get_metric_history(run.info.run_id, column)}
        written = {epoch: float(row[column]) for epoch, row in enumerate(rows) if row[column]}
        assert logged.keys() == written.keys() and all(
            logged[epoch] == pytest.approx(value, rel=1e-5) for epoch, value in written.items()), column
    map50, map50_95 = _val_of_last(data, project / "exp" / "weights" / "last.pt", tmp_path)
    assert map50 > 0.01  # a comparison of something
    assert float(rows[-1]["metrics/mAP_0.5"]) == pytest.approx(map50, abs=1e-3)
    assert float(rows[-1]["metrics/mAP_0.5:0.95"]) == pytest.approx(map50_95, abs=1e-3)


def test_bare_mlflow_at_two_ranks_continues_its_run_after_an_elastic_restart(data, tmp_path):
    """The default ./mlruns store in the job's working directory; rank 1 is killed as soon as the first last.pt is
    written, whether or not the MLflow run exists by then (its store is new: its set-up takes seconds); torchrun
    restarts the job, which resumes from last.pt and continues the run its key names, or makes it."""
    epochs, project = 6, tmp_path / "runs"
    launcher = _torchrun(train_args(data, project, "--mlflow", "--noval", "--noplots", epochs=epochs), tmp_path,
                         tmp_path, max_restarts=1, HOLD_FIRST_ATTEMPT="1")
    last, deadline = project / "exp" / "weights" / "last.pt", time.monotonic() + 120
    while not last.is_file():
        assert launcher.poll() is None and time.monotonic() < deadline, launcher.communicate()[0][-5000:]
        time.sleep(0.05)
    key = TrainingCheckpoint.load(last).tracking[RUN_KEY]  # ours from the first save
    os.kill(worker_pid(launcher, "RANK=1"), signal.SIGKILL)
    output, noted = _finished(launcher, tmp_path)
    assert "resuming from" in output, output[-5000:]
    assert noted == {0: {"import-mlflow", "mkdir-mlruns"}, 1: set()}, noted
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name(str(project)).experiment_id])
    assert run.data.tags[KEY_TAG] == key and run.info.status == "FINISHED"
    tracked = TrainingCheckpoint.load(last).tracking  # the id too, if the store answered before the last save
    assert tracked[RUN_KEY] == key and tracked.get(RUN_ID, run.info.run_id) == run.info.run_id
    steps = [metric.step for metric in client.get_metric_history(run.info.run_id, "train/box_loss")]
    assert sorted(steps) == list(range(epochs)), steps  # each epoch once, those of the killed attempt included
