"""MLflow tracking on the hook points, in one process: against a real tracking server the test starts on 127.0.0.1
(SQLite backend), the local ./mlruns store, stores that cannot be used (one warning, training goes on), a resumed run
that continues its MLflow run (found by its id, by the run's key, or made then with every epoch; a last.pt from
before the key too), a stop that does not wait for a store that has not answered, and a server that hangs, which
never holds up training."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time

import pytest

from detect import train
from detect.errors import Interrupted
from detect.models.safe_io import load_checkpoint, save_checkpoint
from detect.training.hooks import Hook
from detect.training.resume import TrainingCheckpoint
from tests.tracking.server import free_port, mlflow_server
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


@pytest.fixture
def server(tmp_path):
    """`mlflow server` on a free loopback port (tests/tracking/server.py); its URI."""
    with mlflow_server(tmp_path) as (uri, _process):
        yield uri


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
           "closed port": f"http://127.0.0.1:{free_port()}",  # nothing listens there
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
    """Asks for a stop (as SIGTERM would) at the first step of epoch 2, once the MLflow run exists (`wait_for_run`:
    the logger's thread makes it while epoch 1 trains, so the save of the stop must carry its id); `forget_run_id`
    leaves the id out of that save, as when the store answers after it."""

    def __init__(self, wait_for_run: bool = True, forget_run_id: bool = False) -> None:
        self.wait_for_run, self.forget_run_id = wait_for_run, forget_run_id

    def before_step(self, run, index, batch) -> None:
        if run.counters.epoch == 1:
            deadline = time.monotonic() + 60
            while self.wait_for_run and tracking.RUN_ID not in run.tracking and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.forget_run_id:
                run.tracking.pop(tracking.RUN_ID, None)
            run.control.stop_signal = signal.SIGTERM


def _one_curve(client: MlflowClient, run) -> None:
    for key in ("train/box_loss", "metrics/mAP_0.5", "x/lr0"):
        assert _steps(client, run, key) == [0, 1, 2], key  # one curve: each epoch once


@pytest.mark.parametrize("checkpoint", ["ours", "from before the run key"])
def test_a_resumed_run_continues_its_mlflow_run(data, tmp_path, monkeypatch, checkpoint):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # where MLflow puts the artifacts of a SQLite store's new experiment (./mlruns)
    with pytest.raises(Interrupted):
        train.run(callbacks=[StopInSecondEpoch()], **_options(data, tmp_path / "runs", epochs=3, noplots=True))
    save_dir = tmp_path / "runs" / "exp"
    client, stopped = _read_back(uri, tmp_path / "runs")
    assert stopped.info.status == "KILLED"
    last_path = save_dir / "weights" / "last.pt"
    last = TrainingCheckpoint.load(last_path)
    assert last.counters.epoch == 1 and last.tracking == {tracking.RUN_ID: stopped.info.run_id,
                                                          tracking.RUN_KEY: stopped.data.tags[tracking.KEY_TAG]}
    if checkpoint == "from before the run key":  # the id alone, as last.pt kept it before
        payload = load_checkpoint(last_path)
        payload["tracking"] = {tracking.RUN_ID: stopped.info.run_id}
        save_checkpoint(last_path, payload)
    assert train.main(["--resume", str(save_dir), "--no-progress"]) == 0
    client, resumed = _read_back(uri, tmp_path / "runs")  # still one run in the experiment
    assert resumed.info.run_id == stopped.info.run_id and resumed.info.status == "FINISHED"
    _one_curve(client, resumed)
    # the run carries the key of the resumed last.pt (a new one for a checkpoint without)
    assert resumed.data.tags[tracking.KEY_TAG] == TrainingCheckpoint.load(last_path).tracking[tracking.RUN_KEY]


def test_a_resumed_run_finds_the_mlflow_run_by_its_key_when_last_pt_lacks_the_id(data, tmp_path, monkeypatch,
                                                                                  caplog):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Interrupted):
        train.run(callbacks=[StopInSecondEpoch(forget_run_id=True)],
                  **_options(data, tmp_path / "runs", epochs=3, noplots=True))
    save_dir = tmp_path / "runs" / "exp"
    assert list(TrainingCheckpoint.load(save_dir / "weights" / "last.pt").tracking) == [tracking.RUN_KEY]
    with caplog.at_level(logging.INFO, logger="detect.tracking"):
        assert train.main(["--resume", str(save_dir), "--no-progress"]) == 0
    client, resumed = _read_back(uri, tmp_path / "runs")  # the run the first attempt made, continued
    assert f"MLflow: continuing run exp ({resumed.info.run_id}) at {uri}" in caplog.messages
    assert resumed.info.status == "FINISHED"
    _one_curve(client, resumed)


def test_a_stop_before_the_store_answered_waits_for_nothing_and_the_resume_sends_every_epoch(data, tmp_path,
                                                                                           monkeypatch, caplog):
    """The logger's thread never gets an answer in the first attempt (a store that hangs in its set-up); the stop at
    epoch 2 does not wait for it, says what it drops, and the resumed run makes the MLflow run with every epoch,
    epoch 1 read back from results.csv."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    release, ending = threading.Event(), []
    after_train = tracking.MlflowLogger.after_train

    def hanging(self, run, params, rows) -> None:
        release.wait()
        self.warned = True  # once released at the test's end, the thread drops its events without a word

    def timed(self, run, metrics) -> None:
        started = time.monotonic()
        after_train(self, run, metrics)
        ending.append(time.monotonic() - started)

    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING, logger="detect.tracking"):
        patch.setattr(tracking.MlflowLogger, "_open", hanging)
        patch.setattr(tracking.MlflowLogger, "after_train", timed)
        with pytest.raises(Interrupted):
            train.run(callbacks=[StopInSecondEpoch(wait_for_run=False)],
                      **_options(data, tmp_path / "runs", epochs=3, noplots=True))
    try:
        assert ending[0] < 0.5  # no wait at all for a store that has not answered
        assert _tracking_warnings(caplog) == [
            "MLflow: unsent after 0 s, dropped: the MLflow run's start, epoch 1's metrics, config.yaml, results.csv, "
            + "best.pt, the status KILLED; a resumed run sends the epochs' metrics that MLflow lacks"]
        assert train.main(["--resume", str(tmp_path / "runs" / "exp"), "--no-progress"]) == 0
    finally:
        release.set()
    client, resumed = _read_back(uri, tmp_path / "runs")
    assert resumed.info.status == "FINISHED" and resumed.data.params["epochs"] == "3"
    _one_curve(client, resumed)


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
        assert logger._continued(kept, uri, "key") == kept and client.get_run(kept).info.status == "RUNNING"
        assert client.get_run(kept).data.tags[tracking.KEY_TAG] == "key"  # a run from before the key gets it
        assert logger._continued(deleted, uri, "key") is None
        assert logger._continued("0" * 32, uri, "key") is None
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
