"""MLflow tracking on the hook points, in one process: against a real tracking server the test starts on 127.0.0.1
(SQLite backend), the local ./mlruns store, stores that cannot be used (one warning, training goes on), a resumed run
that continues its MLflow run, and a server that hangs, which never holds up training."""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from detect import train
from detect.errors import Interrupted
from detect.training.hooks import Hook
from detect.training.resume import TrainingCheckpoint
from tests.training.helpers import tiny_dataset

mlflow = pytest.importorskip("mlflow", reason="MLflow is optional (pip install 'detect-trainer[mlflow]')")
from mlflow.tracking import MlflowClient

from detect import tracking


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny"))


def _options(data, project, **extra):
    return {"cfg": "yolov5n.yaml", "data": str(data), "imgsz": 64, "batch_size": 4, "epochs": 2, "workers": 0,
            "device": "cpu", "project": str(project), "progress": False, **extra}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """`mlflow server` with a SQLite backend and served artifacts, on a free loopback port; its URI."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--artifacts-destination", str(tmp_path / "served"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    uri, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, process.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the MLflow server did not start"
            time.sleep(0.5)
    yield uri
    process.terminate()
    process.wait(timeout=30)


def _read_back(uri: str, project) -> tuple[MlflowClient, object]:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(str(project))
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    return client, runs[0]


def _steps(client: MlflowClient, run, key: str) -> list[int]:
    return sorted(metric.step for metric in client.get_metric_history(run.info.run_id, key))


def _check_run(client: MlflowClient, run, result) -> None:
    assert run.info.run_name == result.save_dir.name == "exp" and run.info.status == "FINISHED"
    assert run.data.params["epochs"] == "2" and run.data.params["hyp.lr0"] == "0.01"
    losses = client.get_metric_history(run.info.run_id, "train/box_loss")
    assert [metric.step for metric in losses] == [0, 1] and all(metric.value > 0 for metric in losses)
    assert _steps(client, run, "metrics/mAP_0.5:0.95") == [0, 1]
    artifacts = {artifact.path for artifact in client.list_artifacts(run.info.run_id)}
    assert {"results.csv", "results.png", "best.pt", "config.yaml", "PR_curve.png"} <= artifacts, artifacts


def test_a_run_is_tracked_on_a_tracking_server(data, tmp_path, server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)  # turns tracking on without --mlflow
    result = train.run(**_options(data, tmp_path / "runs"))
    _check_run(*_read_back(server, tmp_path / "runs"), result)


def test_mlflow_without_a_server_writes_the_local_store(data, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    result = train.run(mlflow=True, **_options(data, "runs"))
    _check_run(*_read_back(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}", "runs"), result)


def _tracking_warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == "detect.tracking" and record.levelno >= logging.WARNING]


@pytest.mark.parametrize("store", ["file", "closed port", "unknown scheme", "sqlite under a file"])
def test_a_store_that_cannot_be_used_costs_one_warning(data, tmp_path, monkeypatch, caplog, store):
    (tmp_path / "a-file").touch()
    uri = {"file": (tmp_path / "mlruns").as_uri(),  # MLflow's classic form, which MLflow 3 refuses
           "closed port": f"http://127.0.0.1:{_free_port()}",  # nothing listens there
           "unknown scheme": "nowhere://tracking",
           "sqlite under a file": f"sqlite:///{tmp_path / 'a-file' / 'mlflow.db'}"}[store]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with caplog.at_level(logging.WARNING, logger="detect.tracking"):
        result = train.run(**_options(data, tmp_path / "runs", epochs=1, noplots=True))
    assert result.metrics is not None and (result.save_dir / "weights" / "best.pt").is_file()
    (warning,) = _tracking_warnings(caplog)
    assert uri in warning and "sqlite:///" in warning and "http://" in warning, warning


def test_mlflow_not_installed_costs_one_warning(data, tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` raises ImportError
    with caplog.at_level(logging.WARNING, logger="detect.tracking"):
        result = train.run(mlflow=True, **_options(data, "runs", epochs=1, noplots=True))
    assert result.metrics is not None
    (warning,) = _tracking_warnings(caplog)
    assert warning.startswith("MLflow is not installed (pip install 'detect-trainer[mlflow]')"), warning


class StopInSecondEpoch(Hook):
    """Asks for a stop (as SIGTERM would) at the first step of epoch 2, once the MLflow run exists: the logger's thread
    makes it while epoch 1 trains, so the save of the stop must carry its id."""

    def before_step(self, run, index, batch) -> None:
        if run.counters.epoch == 1:
            deadline = time.monotonic() + 60
            while tracking.RUN_ID not in run.tracking and time.monotonic() < deadline:
                time.sleep(0.05)
            run.control.stop_signal = signal.SIGTERM


def test_a_resumed_run_continues_its_mlflow_run(data, tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # where MLflow puts the artifacts of a SQLite store's new experiment (./mlruns)
    with pytest.raises(Interrupted):
        train.run(callbacks=[StopInSecondEpoch()], **_options(data, tmp_path / "runs", epochs=3, noplots=True))
    save_dir = tmp_path / "runs" / "exp"
    client, stopped = _read_back(uri, tmp_path / "runs")
    assert stopped.info.status == "KILLED"
    last = TrainingCheckpoint.load(save_dir / "weights" / "last.pt")
    assert last.counters.epoch == 1 and last.tracking == {tracking.RUN_ID: stopped.info.run_id}
    assert train.main(["--resume", str(save_dir), "--no-progress"]) == 0
    client, resumed = _read_back(uri, tmp_path / "runs")  # still one run in the experiment
    assert resumed.info.run_id == stopped.info.run_id and resumed.info.status == "FINISHED"
    for key in ("train/box_loss", "metrics/mAP_0.5", "x/lr0"):
        assert _steps(client, resumed, key) == [0, 1, 2], key  # one curve: each epoch once


def test_a_run_the_store_lost_is_tracked_in_a_new_one(tmp_path, caplog):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("runs")
    kept, deleted = (client.create_run(experiment).info.run_id for _ in range(2))
    client.set_terminated(kept, status="KILLED")
    client.delete_run(deleted)
    logger = tracking.MlflowLogger()
    logger.client = client
    with caplog.at_level(logging.WARNING, logger="detect.tracking"):
        assert logger._continued(kept, uri) == kept and client.get_run(kept).info.status == "RUNNING"
        assert logger._continued(deleted, uri) is None
        assert logger._continued("0" * 32, uri) is None
    assert _tracking_warnings(caplog) == [
        f"MLflow: run {run_id} of the checkpoint is not in {uri} (deleted?); tracking in a new run"
        for run_id in (deleted, "0" * 32)]


def test_a_hanging_server_never_holds_up_the_hooks(monkeypatch, caplog):
    """Every call to the client blocks until released; the hooks still return at once, and a full queue drops events
    with one warning instead of waiting."""
    release = threading.Event()

    class Hanging:
        def __getattr__(self, name):
            return lambda *args, **kwargs: release.wait()

    logger = tracking.MlflowLogger()
    logger.client = Hanging()
    monkeypatch.setattr(tracking, "QUEUE_SIZE", 3)
    logger.events = tracking.queue.Queue(3)
    logger.sender.start()
    with caplog.at_level(logging.WARNING, logger="detect.tracking"):
        for epoch in range(10):  # the first event hangs in the sender, the queue holds 3, the rest are dropped
            logger._put(lambda epoch=epoch: logger.client.log_batch(epoch))
    release.set()
    logger.close()
    assert not logger.sender.is_alive()
    assert _tracking_warnings(caplog) == ["MLflow: 3 events wait for the tracking server; dropping new ones"]
