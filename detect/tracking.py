"""Experiment tracking on the run's hook points: an MLflow logger (`--mlflow`, or MLFLOW_TRACKING_URI set; the
optional extra detect-trainer[mlflow]). The run's settings and hyp become params, every results.csv column a metric
per epoch (step = epoch), the plots, results.csv and best.pt artifacts; the experiment is --project, the run its
folder's name. A resumed run (--resume, an elastic restart) continues the MLflow run whose id its last.pt keeps.

Only the rank that writes the run tracks: the hooks run there alone, and MLflow is imported and its store opened by
the logger's thread, which before_train starts. A tracking server that is down or slow never stops or slows training:
the hooks only put events on a bounded queue that the thread sends; a store that cannot be used, a full queue or a
failed call is one warning, and what cannot be sent is dropped."""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from detect.evaluation.evaluator import Metrics
from detect.training.hooks import Hook
from detect.training.run import Run

LOGGER = logging.getLogger(__name__)
QUEUE_SIZE = 1000  # events waiting for the tracking server (an epoch is a handful)
FINISH_TIMEOUT_S = 10.0  # how long the end of a run waits for the last events to be sent
PROBE_TIMEOUT_S = 5.0  # how long a tracking server has to answer at all (MLflow's client retries for minutes)
ARTIFACT_SUFFIXES = (".png", ".jpg", ".csv", ".yaml", ".txt")
RUN_ID = "mlflow_run_id"  # the key of the MLflow run's id in Run.tracking, and so in last.pt
STORES_THAT_WORK = "MLflow takes sqlite:///path/to/mlflow.db or http://host:port"


LOCAL_STORE = Path("mlruns")  # the default store: a SQLite database and the artifacts, in the working directory


def tracking_store() -> tuple[str, str | None]:
    """(tracking URI, where new experiments keep their artifacts): MLFLOW_TRACKING_URI and the server's choice, else
    ./mlruns/mlflow.db and ./mlruns/artifacts (embedded: nothing to start; `mlflow ui --backend-store-uri
    sqlite:///mlruns/mlflow.db` shows it)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], None
    return f"sqlite:///{(LOCAL_STORE / 'mlflow.db').resolve()}", (LOCAL_STORE / "artifacts").resolve().as_uri()


def check_reachable(uri: str) -> None:
    """Raise OSError when an http(s) tracking server does not answer within PROBE_TIMEOUT_S; any answer, an HTTP
    error or a TLS one included, leaves the rest to MLflow's client."""
    if urllib.parse.urlsplit(uri).scheme not in ("http", "https"):
        return
    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        pass
    except urllib.error.URLError as error:
        if not isinstance(error.reason, ssl.SSLError):
            raise


def tracking_hooks(mlflow: bool) -> list[Hook]:
    """The trackers a run gets: MLflow with --mlflow, or when MLFLOW_TRACKING_URI is set (as ultralytics does)."""
    return [MlflowLogger()] if mlflow or os.environ.get("MLFLOW_TRACKING_URI") else []


def _first_sentence(error: BaseException) -> str:
    """The error's type and the first sentence of its message (MLflow's go on for lines)."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    sentence = text.splitlines()[0].split(". ")[0]
    return f"{type(error).__name__}: {sentence[:200]}{'...' if len(sentence) > 200 else ''}"


class MlflowLogger(Hook):
    """One MLflow run per training run, fed from a queue by one thread; made on every rank, it touches MLflow only
    from its hook calls, which run on the rank that writes the run (training/hooks.py run_hooks)."""

    def __init__(self) -> None:
        self.client = self.entities = None  # the thread makes them
        self.events: queue.Queue[Callable[[], None] | None] = queue.Queue(QUEUE_SIZE)
        self.run_id: str | None = None
        self.warned = False
        self.sender = threading.Thread(target=self._send, name="detect-mlflow", daemon=True)

    def before_train(self, run: Run) -> None:
        settings = run.settings
        params = {**settings.to_dict(), **{f"hyp.{key}": value for key, value in dataclasses.asdict(run.hyp).items()}}
        self.sender.start()
        self._put(lambda: self._start(run, params))

    def after_epoch(self, run: Run, epoch: int, row: dict[str, float]) -> None:
        metrics = {key: float(value) for key, value in row.items() if key != "epoch" and value is not None}
        self._put(lambda: self._log_metrics(metrics, epoch))

    def after_train(self, run: Run, metrics: Metrics | None) -> None:
        folder = run.folder
        files = [path for path in sorted(folder.save_dir.iterdir()) if path.suffix in ARTIFACT_SUFFIXES]
        if folder.best_path.is_file():
            files.append(folder.best_path)
        status = "KILLED" if run.control.stop_asked() else "FINISHED" if metrics is not None else "FAILED"
        for path in files:
            self._put(lambda path=path: self.client.log_artifact(self.run_id, str(path)))
        self._put(lambda: self.client.set_terminated(self.run_id, status=status))
        self.close()

    def close(self) -> None:
        """Let the sender finish what is queued, for at most FINISH_TIMEOUT_S, then leave it."""
        if self.sender.ident is None:  # before_train never came (an earlier hook failed)
            return
        deadline = time.monotonic() + FINISH_TIMEOUT_S
        try:
            self.events.put(None, timeout=FINISH_TIMEOUT_S)
        except queue.Full:
            pass
        self.sender.join(max(0.0, deadline - time.monotonic()))
        if self.sender.is_alive():
            self._warn(f"MLflow: events still unsent after {FINISH_TIMEOUT_S:g} s; giving up on them")

    def _start(self, run: Run, params: dict) -> None:
        """The thread's first event: MLflow's client on the store, then the run (the checkpoint's, else a new one),
        whose id goes into Run.tracking for the next last.pt. A store that cannot be used is one warning."""
        try:
            from mlflow import entities
            from mlflow.tracking import MlflowClient
        except ImportError:
            self._warn("MLflow is not installed (pip install 'detect-trainer[mlflow]'); training goes on without "
                       "tracking")
            return
        uri, artifact_location = tracking_store()
        try:
            if artifact_location is not None:
                LOCAL_STORE.mkdir(exist_ok=True)
            check_reachable(uri)
            self.entities, self.client = entities, MlflowClient(tracking_uri=uri)
            self.run_id = self._continued(run.tracking.get(RUN_ID), uri)
            if self.run_id is None:
                self.run_id = self._created(run.settings.project, run.folder.save_dir.name, artifact_location)
                self.client.log_batch(self.run_id, params=[self.entities.Param(key, str(value)[:6000])
                                                           for key, value in params.items()])
        except Exception as error:  # noqa: BLE001 - whatever the store says, training goes on
            self._warn(f"MLflow: cannot track in {uri} ({_first_sentence(error)}); {STORES_THAT_WORK}; training goes "
                       "on without tracking")
            return
        run.tracking[RUN_ID] = self.run_id

    def _continued(self, run_id: str | None, uri: str) -> str | None:
        """The checkpoint's run, running again; None when there is none, or (one line) when the store lost it."""
        if run_id is None:
            return None
        from mlflow.exceptions import MlflowException

        try:
            stored = self.client.get_run(run_id)
        except MlflowException as error:
            if error.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            stored = None
        if stored is None or stored.info.lifecycle_stage != "active":
            LOGGER.warning("MLflow: run %s of the checkpoint is not in %s (deleted?); tracking in a new run", run_id,
                           uri)
            return None
        self.client.update_run(run_id, status="RUNNING")
        LOGGER.info("MLflow: continuing run %s (%s) at %s", stored.info.run_name, run_id, uri)
        return run_id

    def _created(self, project: str, name: str, artifact_location: str | None) -> str:
        """A new run named `name` in the experiment `project` (made if need be); its id."""
        experiment = self.client.get_experiment_by_name(project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(
            project, artifact_location=artifact_location)
        run_id = self.client.create_run(experiment_id, run_name=name).info.run_id
        LOGGER.info("MLflow: run %s of experiment %r at %s", name, project, self.client.tracking_uri)
        return run_id

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
                self._warn(f"MLflow: {_first_sentence(error)}; tracking stops for this run (training goes on)")

    def _warn(self, message: str) -> None:
        if not self.warned:
            self.warned = True
            LOGGER.warning("%s", message)
