"""Experiment tracking on the run's hook points: an MLflow logger (`--mlflow`, or MLFLOW_TRACKING_URI set; the
optional extra detect-trainer[mlflow]). The run's settings and hyp become params, every results.csv column a metric
per epoch, the plots, results.csv and best.pt artifacts; the experiment is --project, the run its folder's name.

It runs on the rank that writes the run, and a tracking server that is down or slow never stops or slows training:
the hooks only put events on a bounded queue that one thread sends; when the queue is full or a call fails, the
logger says so once and drops what it cannot send."""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from detect.errors import UserError
from detect.evaluation.evaluator import Metrics
from detect.training.build import Run
from detect.training.hooks import Hook

LOGGER = logging.getLogger(__name__)
QUEUE_SIZE = 1000  # events waiting for the tracking server (an epoch is a handful)
FINISH_TIMEOUT_S = 10.0  # how long the end of a run waits for the last events to be sent
ARTIFACT_SUFFIXES = (".png", ".jpg", ".csv", ".yaml", ".txt")


LOCAL_STORE = Path("mlruns")  # the default store: a SQLite database and the artifacts, in the working directory


def tracking_store() -> tuple[str, str | None]:
    """(tracking URI, where new experiments keep their artifacts): MLFLOW_TRACKING_URI and the server's choice, else
    ./mlruns/mlflow.db and ./mlruns/artifacts (embedded: nothing to start; `mlflow ui --backend-store-uri
    sqlite:///mlruns/mlflow.db` shows it)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], None
    LOCAL_STORE.mkdir(exist_ok=True)
    return f"sqlite:///{(LOCAL_STORE / 'mlflow.db').resolve()}", (LOCAL_STORE / "artifacts").resolve().as_uri()


def tracking_hooks(mlflow: bool) -> list[Hook]:
    """The trackers a run gets: MLflow with --mlflow, or when MLFLOW_TRACKING_URI is set (as ultralytics does)."""
    return [MlflowLogger()] if mlflow or os.environ.get("MLFLOW_TRACKING_URI") else []


class MlflowLogger(Hook):
    """One MLflow run per training run, fed from a queue by one thread."""

    def __init__(self) -> None:
        try:
            from mlflow import entities
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise UserError("--mlflow needs MLflow: pip install 'detect-trainer[mlflow]'") from None
        uri, self.artifact_location = tracking_store()
        self.entities, self.client = entities, MlflowClient(tracking_uri=uri)
        self.events: queue.Queue[Callable[[], None] | None] = queue.Queue(QUEUE_SIZE)
        self.run_id: str | None = None
        self.warned = False
        self.sender = threading.Thread(target=self._send, name="detect-mlflow", daemon=True)

    def before_train(self, run: Run) -> None:
        settings = run.settings
        params = {**settings.to_dict(), **{f"hyp.{key}": value for key, value in dataclasses.asdict(run.hyp).items()}}
        self.sender.start()
        self._put(lambda: self._start(settings.project, run.folder.save_dir.name, params))

    def after_epoch(self, run: Run, epoch: int, row: dict[str, float]) -> None:
        metrics = {key: float(value) for key, value in row.items() if key != "epoch" and value is not None}
        self._put(lambda: self._log_metrics(metrics, epoch))

    def after_train(self, run: Run, metrics: Metrics | None) -> None:
        folder = run.folder
        files = [path for path in sorted(folder.save_dir.iterdir()) if path.suffix in ARTIFACT_SUFFIXES]
        if folder.best_path.is_file():
            files.append(folder.best_path)
        status = "FINISHED" if metrics is not None else "FAILED"
        for path in files:
            self._put(lambda path=path: self.client.log_artifact(self.run_id, str(path)))
        self._put(lambda: self.client.set_terminated(self.run_id, status=status))
        self.close()

    def close(self) -> None:
        """Let the sender finish what is queued, for at most FINISH_TIMEOUT_S, then leave it."""
        deadline = time.monotonic() + FINISH_TIMEOUT_S
        try:
            self.events.put(None, timeout=FINISH_TIMEOUT_S)
        except queue.Full:
            pass
        self.sender.join(max(0.0, deadline - time.monotonic()))
        if self.sender.is_alive():
            self._warn(f"MLflow: events still unsent after {FINISH_TIMEOUT_S:g} s; giving up on them")

    def _start(self, project: str, name: str, params: dict) -> None:
        experiment = self.client.get_experiment_by_name(project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(
            project, artifact_location=self.artifact_location)
        self.run_id = self.client.create_run(experiment_id, run_name=name).info.run_id
        self.client.log_batch(self.run_id, params=[self.entities.Param(key, str(value)[:6000])
                                                   for key, value in params.items()])
        LOGGER.info("MLflow: run %s of experiment %r at %s", name, project, self.client.tracking_uri)

    def _log_metrics(self, metrics: dict[str, float], step: int) -> None:
        timestamp = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[self.entities.Metric(key, value, timestamp, step)
                                                    for key, value in metrics.items()])

    def _put(self, event: Callable[[], None] | None) -> None:
        try:
            self.events.put_nowait(event)
        except queue.Full:
            self._warn(f"MLflow: {QUEUE_SIZE} events wait for the tracking server; dropping new ones")

    def _send(self) -> None:
        """The sender thread: one event after the other; after a failure, the rest are dropped."""
        while (event := self.events.get()) is not None:
            if self.warned:
                continue
            try:
                event()
            except Exception as error:  # noqa: BLE001 - whatever the server or the network does, training goes on
                self._warn(f"MLflow: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}; "
                           "tracking stops for this run (training goes on)")

    def _warn(self, message: str) -> None:
        if not self.warned:
            self.warned = True
            LOGGER.warning("%s", message)
