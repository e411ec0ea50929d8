"""MLflow tracking on the hook points: against a real tracking server the test starts on 127.0.0.1 (SQLite backend),
the local ./mlruns store, and a server that is down or hangs, which never stops or holds up training."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from detect import train
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


def _check_run(client: MlflowClient, run, result) -> None:
    assert run.info.run_name == result.save_dir.name == "exp" and run.info.status == "FINISHED"
    assert run.data.params["epochs"] == "2" and run.data.params["hyp.lr0"] == "0.01"
    losses = client.get_metric_history(run.info.run_id, "train/box_loss")
    assert [metric.step for metric in losses] == [0, 1] and all(metric.value > 0 for metric in losses)
    assert [metric.step for metric in client.get_metric_history(run.info.run_id, "metrics/mAP_0.5:0.95")] == [0, 1]
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


def test_a_server_that_is_down_costs_one_warning(data, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with caplog.at_level(logging.WARNING, logger="detect.tracking"):
        result = train.run(**_options(data, tmp_path / "runs"))
    assert result.metrics is not None and (result.save_dir / "weights" / "best.pt").is_file()
    assert len([record for record in caplog.records if record.name == "detect.tracking"]) == 1


def test_a_hanging_server_never_holds_up_the_hooks(tmp_path, monkeypatch, caplog):
    """Every call to the client blocks until released; the hooks still return at once, and a full queue drops events
    with one warning instead of waiting."""
    monkeypatch.chdir(tmp_path)  # the logger's default store, ./mlruns, is made here
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
    assert [record.getMessage() for record in caplog.records if record.name == "detect.tracking"] == [
        "MLflow: 3 events wait for the tracking server; dropping new ones"]
