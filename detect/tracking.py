"""Experiment tracking on the run's hook points: an MLflow logger (`--mlflow`, or MLFLOW_TRACKING_URI set; the
optional extra detect-trainer[mlflow]). The run's settings and hyp become params, every results.csv column a metric
per epoch (step = epoch), the plots, results.csv and best.pt artifacts; the experiment is --project, the run its
folder's name. The run's identity is ours from its first second: a key that last.pt keeps from its first save and
the MLflow run carries as a tag, so a resumed run (--resume, an elastic restart) continues that MLflow run, found by
its id or, when the store had not answered before the stop, by the key (or makes it then), and sends the epochs of
results.csv that MLflow lacks.

Only the rank that writes the run tracks: the hooks run there alone, and MLflow is imported and its store opened by
the logger's thread, which before_train starts. A tracking server that is down or slow never stops or slows training:
the hooks only put events on a bounded queue that the thread sends; a store that cannot be used, a full queue or a
failed call is one warning, and what cannot be sent is dropped. A stop waits at most STOP_TIMEOUT_S for the thread,
then names what it leaves unsent in one line."""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import queue
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from detect.atomic_file import make_folder, publish, remove_file
from detect.evaluation.evaluator import Metrics
from detect.training.hooks import Hook
from detect.training.run import Run

LOGGER = logging.getLogger(__name__)
QUEUE_SIZE = 1000  # events waiting for the tracking server (an epoch is a handful)
# How long the end of a finished (or failed) run waits for its last events: its artifacts and status are its record,
# and no resumed run will send them; bounded, so that a server that hangs cannot hold the end.
FINISH_TIMEOUT_S = 10.0
# How long a stopped run waits for the thread: a stop has 5 s in all (docs/scale.md, "Many nodes and preemption"), and what
# is left unsent is the resumed run's to send (the epochs' metrics, read back from results.csv).
STOP_TIMEOUT_S = 1.0
PROBE_TIMEOUT_S = 5.0  # how long a tracking server has to answer at all (MLflow's client retries for minutes)
ARTIFACT_SUFFIXES = (".png", ".jpg", ".csv", ".yaml", ".txt")
RUN_ID = "mlflow_run_id"  # the key of the MLflow run's id in Run.tracking, and so in last.pt
RUN_KEY = "run_key"  # our own key of the run in Run.tracking, set before the first save (older last.pt lack it)
KEY_TAG = "detect.run_key"  # the MLflow tag that holds it
# What makes a new SQLite store's tables (set_up_new_store), given the draft's URI.
MAKE_TABLES = ("import sys; from mlflow.tracking import MlflowClient; "
               "MlflowClient(tracking_uri=sys.argv[1]).search_experiments(max_results=1)")
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


def set_up_new_store(uri: str) -> None:
    """Make a SQLite store that does not exist yet whole before it has its name: MLflow's first use of a file makes
    its tables and migrates them (seconds), and a process that ends meanwhile (a stop does not wait for it) leaves a
    file no MLflow can open again ("duplicate column name"). So the tables are made in a draft beside it, which then
    gets the store's name, unless another process named one first; drafts that ended processes left are removed.
    The tables are made by a process of its own: a stop leaves it to finish, where the interpreter's end stopped a
    thread left inside MLflow's migration in native code and aborted the process ("terminate called without an
    active exception", exit -6 instead of 143). Other stores are left as they are."""
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return
    path = Path(url.database)
    host = socket.gethostname()
    _remove_abandoned_drafts(path, host)
    if path.exists():
        return
    make_folder(path.parent)
    draft = path.with_name(f".{path.name}.{host}.{os.getpid()}.new")
    try:
        made = subprocess.run([sys.executable, "-c", MAKE_TABLES, url.set(database=str(draft)).render_as_string(
            hide_password=False)], capture_output=True, text=True, check=False)
        if made.returncode:
            raise RuntimeError((made.stderr.strip().splitlines() or [f"exit {made.returncode}"])[-1])
        publish(draft, path)  # unlike a rename, it never replaces a store another process made meanwhile
    finally:
        remove_file(draft)


def _remove_abandoned_drafts(path: Path, host: str) -> None:
    """The drafts of `path` (and their SQLite journals) whose process on this machine has ended."""
    for draft in path.parent.glob(f".{glob.escape(path.name)}.{glob.escape(host)}.*.new"):
        pid = draft.name.rsplit(".", 2)[-2]
        if pid.isdigit() and not _alive(int(pid)):
            remove_file(draft)
            remove_file(draft.with_name(f"{draft.name}-journal"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal: whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it does, another user's
        pass
    return True


def _first_sentence(error: BaseException) -> str:
    """The error's type and the first sentence of its message (MLflow's go on for lines)."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    sentence = text.splitlines()[0].split(". ")[0]
    return f"{type(error).__name__}: {sentence[:200]}{'...' if len(sentence) > 200 else ''}"


class Event(NamedTuple):
    """What the logger's thread sends: `what` names it in the line of a stop that leaves it unsent."""

    what: str
    send: Callable[[], None]


class MlflowLogger(Hook):
    """One MLflow run per training run, fed from a queue by one thread; made on every rank, it touches MLflow only
    from its hook calls, which run on the rank that writes the run (training/hooks.py run_hooks)."""

    def __init__(self) -> None:
        self.client = self.entities = None  # the thread makes them
        self.events: queue.Queue[Event | None] = queue.Queue(QUEUE_SIZE)
        self.sending: Event | None = None  # the event the thread is sending now
        self.answered = threading.Event()  # the store answered the run's start, or it failed
        self.run_id: str | None = None
        self.warned = False
        self.sender = threading.Thread(target=self._send, name="detect-mlflow", daemon=True)

    def before_train(self, run: Run) -> None:
        """The run's key (before any last.pt is written, so that a stop at any second keeps it) and the thread."""
        run.tracking.setdefault(RUN_KEY, uuid.uuid4().hex)
        hyp = {f"hyp.{key}": value for key, value in dataclasses.asdict(run.hyp).items()}
        params = {**run.settings.to_dict(), **hyp}
        # A resumed run's earlier epochs, read before it adds any.
        rows = [(int(row["epoch"]), _metrics(row)) for row in run.results.rows()]
        self.sender.start()
        self._put(Event("the MLflow run's start", lambda: self._start(run, params, rows)))

    def after_epoch(self, run: Run, epoch: int, row: dict[str, float]) -> None:
        metrics = _metrics(row)
        self._put(Event(f"epoch {epoch + 1}'s metrics", lambda: self._log_metrics(metrics, epoch)))

    def after_train(self, run: Run, metrics: Metrics | None) -> None:
        """The artifacts and the status, waited for at most FINISH_TIMEOUT_S, or STOP_TIMEOUT_S when a stop ends the
        run."""
        folder, stopped = run.folder, run.control.stop_asked()
        files = [path for path in sorted(folder.save_dir.iterdir()) if path.suffix in ARTIFACT_SUFFIXES]
        if folder.best_path.is_file():
            files.append(folder.best_path)
        status = "KILLED" if stopped else "FINISHED" if metrics is not None else "FAILED"
        for path in files:
            self._put(Event(path.name, lambda path=path: self.client.log_artifact(self.run_id, str(path))))
        self._put(Event(f"the status {status}", lambda: self.client.set_terminated(self.run_id, status=status)))
        if stopped:  # a store that has not answered the start yet (its first use: seconds) is not waited for
            self.close(STOP_TIMEOUT_S if self.answered.is_set() else 0.0,
                       "; a resumed run sends the epochs' metrics that MLflow lacks")
        else:
            self.close()

    def close(self, timeout_s: float = FINISH_TIMEOUT_S, note: str = "") -> None:
        """Let the sender finish what is queued, for at most `timeout_s`, then leave it: one line names what it leaves
        unsent (`note` says what becomes of it)."""
        if self.sender.ident is None:  # before_train never came (an earlier hook failed)
            return
        deadline = time.monotonic() + timeout_s
        try:
            self.events.put(None, timeout=timeout_s)
        except queue.Full:
            pass
        self.sender.join(max(0.0, deadline - time.monotonic()))
        unsent = self._unsent() if self.sender.is_alive() else []
        if unsent:
            self._warn(f"MLflow: unsent after {timeout_s:g} s, dropped: {', '.join(unsent)}{note}")

    def _unsent(self) -> list[str]:
        """What the thread has not sent yet: the event at hand, then the queue (none after a failure: the rest was
        dropped with its warning)."""
        if self.warned:
            return []
        with self.events.mutex:
            waiting = [event.what for event in self.events.queue if event is not None]
        sending = self.sending
        return ([sending.what] if sending is not None else []) + waiting

    def _start(self, run: Run, params: dict, rows: list[tuple[int, dict[str, float]]]) -> None:
        """The thread's first event (`answered` once it ends, however it ends)."""
        try:
            self._open(run, params, rows)
        finally:
            self.answered.set()

    def _open(self, run: Run, params: dict, rows: list[tuple[int, dict[str, float]]]) -> None:
        """MLflow's client on the store, then the run (the checkpoint's, found by its id or our key, else a new one),
        whose id goes into Run.tracking for the next last.pt, and the epochs it lacks. A store that cannot be used is
        one warning."""
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
                make_folder(LOCAL_STORE)
            check_reachable(uri)
            set_up_new_store(uri)
            self.entities, self.client = entities, MlflowClient(tracking_uri=uri)
            experiment_id = self._experiment(run.folder.project, artifact_location)
            run_key = run.tracking[RUN_KEY]
            self.run_id = (self._continued(run.tracking.get(RUN_ID), uri, run_key)
                           or self._found(experiment_id, run_key)
                           or self._created(experiment_id, run.folder.project, run.folder.save_dir.name, run_key))
            if not self.client.get_run(self.run_id).data.params:  # new, or made by an attempt stopped before these
                self.client.log_batch(self.run_id, params=[self.entities.Param(key, str(value)[:6000])
                                                           for key, value in params.items()])
            self._catch_up(rows)
        except Exception as error:  # noqa: BLE001 - whatever the store says, training goes on
            self._warn(f"MLflow: cannot track in {uri} ({_first_sentence(error)}); {STORES_THAT_WORK}; training goes "
                       "on without tracking")
            return
        run.tracking[RUN_ID] = self.run_id

    def _continued(self, run_id: str | None, uri: str, key: str) -> str | None:
        """The checkpoint's run, running again (and tagged with `key`); None when there is none, or (one line) when
        the store lost it."""
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
        if stored.data.tags.get(KEY_TAG) != key:  # a run of a last.pt from before the key
            self.client.set_tag(run_id, KEY_TAG, key)
        LOGGER.info("MLflow: continuing run %s (%s) at %s", stored.info.run_name, run_id, uri)
        return run_id

    def _found(self, experiment_id: str, key: str) -> str | None:
        """The run that a stopped attempt made with our `key` before its id reached last.pt, running again."""
        runs = self.client.search_runs([experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=1)
        if not runs:
            return None
        run_id = runs[0].info.run_id
        self.client.update_run(run_id, status="RUNNING")
        LOGGER.info("MLflow: continuing run %s (%s) at %s", runs[0].info.run_name, run_id, self.client.tracking_uri)
        return run_id

    def _experiment(self, project: str, artifact_location: str | None) -> str:
        """The id of the experiment `project`, made if need be."""
        experiment = self.client.get_experiment_by_name(project)
        return experiment.experiment_id if experiment else self.client.create_experiment(
            project, artifact_location=artifact_location)

    def _created(self, experiment_id: str, project: str, name: str, key: str) -> str:
        """A new run named `name` in the experiment `project`, tagged with our `key`; its id."""
        run_id = self.client.create_run(experiment_id, run_name=name, tags={KEY_TAG: key}).info.run_id
        LOGGER.info("MLflow: run %s of experiment %r at %s", name, project, self.client.tracking_uri)
        return run_id

    def _catch_up(self, rows: list[tuple[int, dict[str, float]]]) -> None:
        """Log the epochs of results.csv (those before this start) that the run lacks: those a stop left unsent, or
        all of them in a run made only now."""
        if not rows:
            return
        logged = {metric.step for metric in self.client.get_metric_history(self.run_id, "train/box_loss")}
        for epoch, metrics in rows:
            if epoch not in logged:
                self._log_metrics(metrics, epoch)

    def _log_metrics(self, metrics: dict[str, float], step: int) -> None:
        timestamp = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[self.entities.Metric(key, value, timestamp, step)
                                                    for key, value in metrics.items()])

    def _put(self, event: Event) -> None:
        try:
            self.events.put_nowait(event)
        except queue.Full:
            self._warn(f"MLflow: {QUEUE_SIZE} events wait for the tracking server; dropping new ones")

    def _send(self) -> None:
        """The sender thread: one event after the other; after a failure, the rest are dropped."""
        while (event := self.events.get()) is not None:
            if self.warned:
                continue
            self.sending = event
            try:
                event.send()
            except Exception as error:  # noqa: BLE001 - whatever the server or the network does, training goes on
                self._warn(f"MLflow: {_first_sentence(error)}; tracking stops for this run (training goes on)")
            self.sending = None

    def _warn(self, message: str) -> None:
        if not self.warned:
            self.warned = True
            LOGGER.warning("%s", message)


def _metrics(row: dict[str, float | None]) -> dict[str, float]:
    """A results.csv row as MLflow metrics: every column but the epoch, empty cells left out."""
    return {key: float(value) for key, value in row.items() if key != "epoch" and value is not None}
