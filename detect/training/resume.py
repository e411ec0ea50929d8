"""What a training checkpoint holds, typed (`TrainingCheckpoint`: the one reader and writer of its payload keys), and
where a run resumes from (`resume_point`: the one answer for --resume PATH or a run folder, bare --resume, an elastic
restart with or without shared storage, inside an epoch or at its end)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import random
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from detect.backend import Backend
from detect.config import Hyp, from_mapping, read_yaml
from detect.errors import ConfigError, UserError
from detect.models.safe_io import EMA_KEY, MODEL_KEY, load_checkpoint
from detect.models.yolo import check_finite
from detect.training.distributed import DistContext, all_gather_objects, broadcast_object
from detect.training.run_folder import CONFIG_FILE, LAST, RUN_WEIGHTS
from detect.training.settings import Resume, TrainSettings

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass
class Counters:
    """Where a run stands (all plain numbers); the epoch loop advances them and a resumed run continues from them."""

    epoch: int = 0  # epochs completed
    iteration: int = 0  # batches seen since the start, across epochs (drives warmup and multi-scale)
    last_optimizer_step: int = -1  # the iteration of the last optimizer step (gradient accumulation)
    best_fitness: float = 0.0
    best_epoch: int = -1
    nonfinite_steps: int = 0  # steps skipped for a non-finite loss, whole run
    # A checkpoint saved inside an epoch: batches of epoch `epoch` done, and that epoch's sums so far.
    batch: int = 0
    epoch_loss_sum: list[float] = dataclasses.field(default_factory=lambda: [0.0, 0.0, 0.0])
    epoch_steps: int = 0
    epoch_images: int = 0

    def end_epoch(self) -> None:
        """The epoch is whole: the next one starts at its first batch with empty sums."""
        self.epoch += 1
        self.batch, self.epoch_loss_sum, self.epoch_steps, self.epoch_images = 0, [0.0, 0.0, 0.0], 0, 0


def rng_state(backend: Backend) -> dict[str, Any]:
    """Python, numpy, torch CPU and device generator states, as tensors and plain values (weights_only-safe)."""
    kind, keys, position, has_gauss, cached = np.random.get_state()
    return {
        "device": backend.rng_state(),
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
    }


def restore_rng_state(state: dict[str, Any], backend: Backend) -> None:
    """Put back what rng_state() saved."""
    backend.set_rng_state(state["device"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy = state["numpy"]
    np.random.set_state((numpy["kind"], numpy["keys"].numpy().astype(np.uint32), numpy["position"],
                         numpy["has_gauss"], numpy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])


@dataclasses.dataclass
class TrainingCheckpoint:
    """What last.pt, best.pt and epoch<N>.pt hold. The model entries are models/weights.py's model_state (what every
    weights reader loads); last.pt alone holds the optimizer, scaler, scheduler and RNG states a resume needs, and the
    trackers' run ids when the run is tracked (an optional entry: files without it read as before)."""

    FORMAT: ClassVar[str] = "detect-train-1"  # the payload layout; a new layout gets a new name and a reader here

    model: dict  # model_state(model): yaml mapping, class names, state dict
    ema: dict  # model_state(ema.module)
    ema_updates: int
    counters: Counters
    settings: TrainSettings
    hyp: Hyp
    optimizer: dict | None = None
    scaler: dict | None = None
    scheduler: dict | None = None
    rng: dict | None = None
    tracking: dict[str, str] = dataclasses.field(default_factory=dict)  # experiment trackers' ids of the run
    date: str = dataclasses.field(
        default_factory=lambda: datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))

    @property
    def resumable(self) -> bool:
        """Whether it holds every state a resume restores (last.pt does; best.pt and snapshots do not)."""
        return None not in (self.optimizer, self.scaler, self.scheduler, self.rng)

    def to_payload(self) -> dict[str, Any]:
        """The dict torch.save writes: tensors and plain values only."""
        return {
            "format": self.FORMAT, "date": self.date, MODEL_KEY: self.model,
            EMA_KEY: {**self.ema, "updates": self.ema_updates},
            "optimizer": self.optimizer, "scaler": self.scaler, "scheduler": self.scheduler,
            "progress": dataclasses.asdict(self.counters), "rng": self.rng,
            "config": {"settings": self.settings.to_dict(), "hyp": dataclasses.asdict(self.hyp)},
            **({"tracking": dict(self.tracking)} if self.tracking else {}),
        }

    @classmethod
    def from_payload(cls, payload: dict, source: str) -> TrainingCheckpoint:
        """Read a payload written by to_payload; anything else is a UserError naming `source`."""
        if payload.get("format") != cls.FORMAT:
            raise UserError(f"{source} is not a detect training checkpoint; --resume needs a run's "
                            f"{RUN_WEIGHTS}/{LAST}")
        config = payload["config"]
        ema = dict(payload[EMA_KEY])
        return cls(model=payload[MODEL_KEY], ema=ema, ema_updates=int(ema.pop("updates")),
                   counters=Counters(**payload["progress"]),
                   settings=TrainSettings.from_dict(config["settings"], f"{source} (stored settings)"),
                   hyp=from_mapping(Hyp, config["hyp"], f"{source} (stored hyp)"), optimizer=payload["optimizer"],
                   scaler=payload["scaler"], scheduler=payload["scheduler"], rng=payload["rng"],
                   tracking=dict(payload.get("tracking", {})), date=payload["date"])

    @classmethod
    def load(cls, path: Path) -> TrainingCheckpoint:
        """The checkpoint file at `path` (read with weights_only, models/safe_io.py)."""
        return cls.from_payload(load_checkpoint(path), str(path))


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """A checkpoint a run continues from, and the settings it continues with (its stored ones, some given anew)."""

    path: Path
    checkpoint: TrainingCheckpoint
    settings: TrainSettings


def _resumable(path: Path, overrides: dict[str, Any], checkpoint: TrainingCheckpoint | None = None) -> ResumePoint:
    """The checkpoint at `path` (or `checkpoint`, sent by another rank) with its stored settings (`overrides` replacing
    some), else a UserError saying why it cannot resume."""
    checkpoint = TrainingCheckpoint.load(path) if checkpoint is None else checkpoint
    if not checkpoint.resumable:
        raise UserError(f"{path} holds no optimizer, scaler, scheduler or RNG state (a best.pt or snapshot?); "
                        f"resume from {LAST}")
    stored = checkpoint.settings
    if checkpoint.counters.epoch >= stored.epochs:
        raise UserError(f"{path}: the run already finished its {stored.epochs} epochs; nothing to resume")
    for state in (checkpoint.model, checkpoint.ema):  # a diverged run: resuming would continue from NaN
        check_finite(state["state_dict"], path)
    save_dir = path.parent.parent  # <project>/<name>/weights/last.pt
    settings = dataclasses.replace(stored, **overrides, exist_ok=True, project=str(save_dir.parent),
                                   name=save_dir.name)
    return ResumePoint(path, checkpoint, settings)


def _latest_last(project: Path, missing_ok: bool) -> Path | None:
    """The most recently written <project>/*/weights/last.pt; None when there is none and `missing_ok`."""
    candidates = sorted(project.glob(f"*/{RUN_WEIGHTS}/{LAST}"), key=lambda path: path.stat().st_mtime)
    if not candidates and not missing_ok:
        raise UserError(f"--resume: no {project}/*/{RUN_WEIGHTS}/{LAST} to resume from; give the checkpoint's path")
    return candidates[-1] if candidates else None


def _given_checkpoint(path: Path, missing_ok: bool) -> Path | None:
    """--resume PATH: a checkpoint file, or a run folder (its weights/last.pt, what a stopped run's line names);
    None when neither is here and `missing_ok` (another node may hold it)."""
    if path.is_dir():
        path = path / RUN_WEIGHTS / LAST
        if not path.is_file() and not missing_ok:
            raise UserError(f"--resume {path.parent.parent}: a folder without {RUN_WEIGHTS}/{LAST}; give a run "
                            "folder or a last.pt")
    if not path.is_file() and not missing_ok:
        raise UserError(f"checkpoint not found: {path} (give a run folder or its {RUN_WEIGHTS}/{LAST})")
    return path if path.is_file() else None


def _elastic_last(project: Path, context: DistContext) -> Path | None:
    """After torchrun restarted the job (--max-restarts), the last.pt of this job's run folder, if any."""
    if context.restart_count == 0:
        return None
    folders = []
    for config in project.glob(f"*/{CONFIG_FILE}"):
        try:
            job = read_yaml(config).get("job")
        except ConfigError:  # a config.yaml that cannot be read is no run of this job
            continue
        ours = isinstance(job, dict) and job.get("run_id") == context.run_id
        if ours and (config.parent / RUN_WEIGHTS / LAST).is_file():
            folders.append(config.parent)
    if not folders:
        LOGGER.warning("restart %d of job %r: no %s of this job yet, starting again", context.restart_count,
                       context.run_id, LAST)
        return None
    latest = max(folders, key=lambda folder: (folder / RUN_WEIGHTS / LAST).stat().st_mtime)
    return latest / RUN_WEIGHTS / LAST


def _local_point(project: Path, context: DistContext, resume: Resume,
                 overrides: dict[str, Any]) -> ResumePoint | UserError | None:
    """What this rank's storage says: the resume point, the error that stops the run, or nowhere (a new run, or a
    checkpoint another node may hold)."""
    try:
        if resume.newest:
            path = _latest_last(project, missing_ok=context.distributed)
        elif resume.path is not None:
            path = _given_checkpoint(resume.path, missing_ok=context.distributed)
        else:
            path = _elastic_last(project, context)
        return None if path is None else _resumable(path, overrides)
    except UserError as error:
        if not context.distributed:
            raise
        return error


def resume_point(project: Path, context: DistContext, resume: Resume,
                 overrides: dict[str, Any]) -> tuple[ResumePoint | None, DistContext]:
    """Where the run continues from, the same on every rank, and the job's context: --resume (the newest last.pt
    of `project`, the run's --project, or the checkpoint or run folder at its path), else this torchrun job's last.pt
    after an elastic restart, else nowhere (None: a new run). Called once, after the process group exists.

    On storage that is not shared only some nodes see the run folder: the rank that holds the newest checkpoint of
    the job becomes its main rank (it goes on writing that folder, whatever its number) and sends the checkpoint to
    the ranks that lack it. An error on any rank stops every rank with the same line."""
    local = _local_point(project, context, resume, overrides)
    if not context.distributed:
        return local, context
    seen = all_gather_objects(context, str(local) if isinstance(local, UserError) else
                              local.checkpoint.counters.iteration if local else -1)
    errors = [value for value in seen if isinstance(value, str)]
    if errors:
        raise UserError(errors[0])
    newest = max(range(context.world_size), key=lambda rank: (seen[rank], -rank))
    if seen[newest] < 0:
        if resume.asked:
            raise UserError(f"--resume {resume.path or ''}: no rank of the job can read a checkpoint "
                            f"to resume from")
        return None, context
    context = dataclasses.replace(context, main_rank=newest)
    if min(seen) == seen[newest]:  # every rank read the same checkpoint (shared storage)
        return local, context
    path, checkpoint = broadcast_object(context, (str(local.path), local.checkpoint) if context.is_main else None)
    if context.is_main:
        LOGGER.info("rank %d holds %s and sends it to the ranks that cannot see it", newest, path)
    if local is not None and seen[context.rank] == seen[newest]:
        return local, context
    return _resumable(Path(path), overrides, checkpoint), context
