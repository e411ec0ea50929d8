"""The Optuna study behind --evolve: its storage (SQLite in the study folder by default), sampler and settings."""

from __future__ import annotations

import dataclasses
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from detect.config import Hyp, load_hyp
from detect.errors import UserError, one_line
from detect.training.settings import TrainSettings

SAMPLERS = ("tpe", "cmaes", "random")
INSTALL = "pip install 'detect-trainer[evolve]'"
# A process that dies mid-trial stops beating; after the grace period any process of the study fails that trial
# and queues its hyp again (Optuna's heartbeat). 10 s is cheap next to a trial and keeps a restart's wait short.
HEARTBEAT_SECONDS = 10
GRACE_SECONDS = 30
OPEN_ATTEMPTS = 3
# Settings that may differ between the processes of one study: the machine, the reporting, the flags every trial
# sets itself, and the hyp path (its values count instead, so a copy of the file elsewhere is the same study).
PER_PROCESS_FIELDS = ("device", "workers", "progress", "project", "name", "exist_ok", "dist_timeout",
                  "npu_jit_compile", "npu_allow_hf32", "nms_device", "noval", "nosave", "hyp")


def import_optuna() -> ModuleType:
    """optuna, or one UserError line saying what to install."""
    try:
        import optuna
    except ImportError:
        raise UserError(f"--evolve needs optuna: {INSTALL}") from None
    return optuna


def default_storage(folder: Path) -> str:
    """The embedded SQLite database of a study folder."""
    return f"sqlite:///{(folder / 'study.db').resolve()}"


def open_storage(optuna: ModuleType, url: str, on_stale: Callable[[Any], None]) -> Any:
    """An Optuna RDB storage for `url` with heartbeats on, so a killed process's trial is retried; `on_stale` is
    called with each such trial first."""
    from sqlalchemy.exc import IntegrityError, OperationalError  # Optuna's RDB layer

    # SQLite serialises writers; two processes wait for each other's short writes instead of failing at once.
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None
    with warnings.catch_warnings():  # heartbeats are marked experimental since Optuna 2.9, and still work
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback()

    def stale(study: Any, trial: Any) -> None:
        on_stale(trial)
        retry(study, trial)

    for _ in range(OPEN_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(
                    url, engine_kwargs=engine_kwargs, heartbeat_interval=HEARTBEAT_SECONDS,
                    grace_period=GRACE_SECONDS, heartbeat_stale_trial_callback=stale)
            if url.startswith("sqlite"):
                lock_before_reading(storage.engine)
            return storage
        except Exception as caught:  # noqa: BLE001 (a bad URL, a missing database driver, a server that is down)
            error = caught
            # Processes opening a new database together race to create its tables and version row: the loser
            # finds them made a moment later. Any other error (a bad URL, no driver) is final.
            if not isinstance(caught, (IntegrityError, OperationalError)):
                break
            time.sleep(1)
    raise UserError(f"--evolve-storage {url}: cannot open it ({one_line(error)})")


def lock_before_reading(engine: Any) -> None:
    """Make each SQLite transaction take the database's write lock when it begins, not at its first write.

    Optuna claims a queued trial by reading that it waits and then marking it running, in one transaction; its
    SELECT ... FOR UPDATE locks the row on a server database, but SQLite ignores FOR UPDATE and lets two processes
    read "waiting" before either writes, so both ran the same trial. BEGIN IMMEDIATE serialises the transactions
    instead (each is a few milliseconds; the others wait up to the connection's timeout)."""
    from sqlalchemy import event

    def manual_transactions(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver stops opening transactions itself

    def begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    event.listen(engine, "connect", manual_transactions)
    event.listen(engine, "begin", begin_immediate)
    engine.dispose()  # the connections opened so far were made without the first listener


def build_sampler(optuna: ModuleType, name: str) -> Any:
    """The sampler `name` proposes hyps with: tpe (default), cmaes or random."""
    if name == "cmaes":
        try:
            import cmaes  # noqa: F401  (Optuna's CMA-ES sampler needs it)
        except ImportError:
            raise UserError(f"--evolve-sampler cmaes needs the cmaes package: {INSTALL}") from None
        return optuna.samplers.CmaEsSampler()
    if name == "random":
        return optuna.samplers.RandomSampler()
    # constant_liar: a process proposing while others' trials run treats those as poor, so it looks elsewhere.
    return optuna.samplers.TPESampler(constant_liar=True)


def study_identity(settings: TrainSettings, start: Hyp) -> dict[str, Any]:
    """What every process of one study must agree on: the run's flags and the start hyp's values."""
    values = {key: value for key, value in settings.to_dict().items() if key not in PER_PROCESS_FIELDS}
    return json.loads(json.dumps({**values, "start_hyp": dataclasses.asdict(start)}))


def open_study(optuna: ModuleType, storage: Any, name: str, sampler: Any, identity: dict[str, Any],
               start_params: dict[str, float]) -> Any:
    """Create study `name`, its first trial the start hyp, or join it when it exists with the same identity."""
    try:
        study = optuna.create_study(storage=storage, study_name=name, direction="maximize", sampler=sampler)
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(storage=storage, study_name=name, sampler=sampler)
        stored = study.user_attrs.get("identity")
        if stored is not None and stored != identity:
            changed = sorted(key for key in identity.keys() | stored.keys() if identity.get(key) != stored.get(key))
            raise UserError(f"study {name!r} was started with other settings ({', '.join(changed)}): give the same "
                            f"flags to continue it, or --name NEW for a new study") from None
        return study
    # Only the creator queues the start hyp, so two processes starting together never run it twice.
    study.set_user_attr("identity", identity)
    study.enqueue_trial(start_params)
    return study


def check_settings(settings: TrainSettings) -> Hyp:
    """Fail before the first trial on what would fail every trial: no model, a bad yaml, a missing split folder,
    missing weights."""
    from detect.data import load_data_config
    from detect.data.data_config import check_sources
    from detect.models.spec import load_model_spec
    from detect.models.weights import resolve_weights

    if settings.cfg is None and settings.weights is None:
        raise UserError("give a model: --cfg yolov5s.yaml (from scratch) and/or --weights FILE (fine-tune)")
    start = load_hyp(settings.hyp)
    check_sources(load_data_config(settings.data), ("train", "val"))
    if settings.cfg is not None:
        load_model_spec(settings.cfg)
    if settings.weights is not None:
        resolve_weights(settings.weights)
    return start
