"""MLflow at 2 ranks under torchrun (gloo on the CPU): one MLflow run of the job, tracked by the rank that writes the
run; the other rank never imports MLflow nor makes its store (which crashed the job before: both ranks set up the
same SQLite store at once)."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.helpers import tiny_dataset, train_args

pytest.importorskip("mlflow", reason="MLflow is optional (pip install 'detect-trainer[mlflow]')")
from mlflow.tracking import MlflowClient

from detect.training.results import COLUMNS

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
# Each worker of the job notes, in IMPORT_LOG/rank<RANK>, whether it imported MLflow or made a ./mlruns folder.
WATCH_SITE = """
import os, sys
if os.environ.get("RANK") is not None:
    seen = set()

    def watch(event, args):
        if event == "import" and str(args[0]).split(".")[0] == "mlflow":
            what = "import mlflow"
        elif event == "os.mkdir" and os.path.basename(os.fsdecode(args[0])) == "mlruns":
            what = "mkdir mlruns"
        else:
            return
        if what not in seen:
            seen.add(what)
            with open(os.path.join(os.environ["IMPORT_LOG"], "rank" + os.environ["RANK"]), "a") as log:
                log.write(what + "\\n")

    sys.addaudithook(watch)
"""
ALL_ROW = re.compile(r"^\s+all\s+\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+([\d.]+)\s*$", re.MULTILINE)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny"))


def _torchrun(args: list[str], tmp_path: Path, cwd: Path, **environ: str) -> tuple[str, dict[str, set[str]]]:
    """Two ranks of `python -m detect.train args` in `cwd`; their output, and what each rank noted (WATCH_SITE)."""
    site, log = tmp_path / "site", tmp_path / "imports"
    site.mkdir()
    log.mkdir()
    (site / "sitecustomize.py").write_text(WATCH_SITE)
    base = {key: value for key, value in os.environ.items() if key != "MLFLOW_TRACKING_URI"}
    finished = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "detect.train",
         *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False,
        env={**base, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]),
             "IMPORT_LOG": str(log), **environ})
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, output[-5000:]
    assert "Traceback" not in output, output[-5000:]
    return output, {rank: set((log / f"rank{rank}").read_text().split("\n")) - {""}
                    if (log / f"rank{rank}").is_file() else set() for rank in (0, 1)}


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
    output, noted = _torchrun(train_args(data, project), tmp_path, REPO, MLFLOW_TRACKING_URI=uri)
    assert noted == {0: {"import mlflow"}, 1: set()}, noted
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


def test_two_ranks_with_bare_mlflow_write_one_run_to_the_local_store(data, tmp_path):
    project = tmp_path / "runs"
    output, noted = _torchrun(train_args(data, project, "--mlflow", "--noval", "--noplots", epochs=1), tmp_path,
                              tmp_path)
    assert noted == {0: {"import mlflow", "mkdir mlruns"}, 1: set()}, noted
    client, run = _the_run(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}", project, output)
    assert [metric.step for metric in client.get_metric_history(run.info.run_id, "train/box_loss")] == [0]
