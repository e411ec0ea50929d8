"""The run folder runs/train/<name>/ and its checkpoints: the one owner of their layout, of what a training checkpoint
holds (everything that makes a resumed run continue exactly, as tensors and plain values), and of where a run
resumes from (--resume, or the job's last.pt after an elastic restart)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from detect.backend import Backend
from detect.config import Hyp
from detect.data import DataConfig, LabelledSplit
from detect.errors import UserError
from detect.models.checkpoint import load_checkpoint
from detect.run_dir import make_run_dir
from detect.training.distributed import DistContext, all_gather_objects, broadcast_object
from detect.training.settings import TrainSettings

LOGGER = logging.getLogger(__name__)
FORMAT = "detect-train-1"
CONFIG_FILE = "config.yaml"
WEIGHTS_DIR = "weights"
LAST, BEST = "last.pt", "best.pt"


@dataclasses.dataclass
class Progress:
    """Counters that a resumed run continues from (all plain numbers)."""

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


def build_payload(*, model: dict, ema: dict | None, optimizer: dict | None, scaler: dict | None,
                  scheduler: dict | None, progress: Progress, rng: dict | None, config: dict) -> dict[str, Any]:
    """One checkpoint dict; optimizer, scaler, scheduler and rng may be None (best.pt, epoch snapshots)."""
    return {
        "format": FORMAT,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": model,
        "ema": ema,
        "optimizer": optimizer,
        "scaler": scaler,
        "scheduler": scheduler,
        "progress": dataclasses.asdict(progress),
        "rng": rng,
        "config": config,
    }


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """A checkpoint a run continues from: its payload and the settings it was started with."""

    path: Path
    payload: dict
    settings: TrainSettings

    @property
    def epoch(self) -> int:
        """Epochs the checkpoint's run had completed."""
        return int(self.payload["progress"]["epoch"])


def _resumable(path: Path, overrides: dict[str, Any], payload: dict | None = None) -> ResumePoint:
    """The checkpoint at `path` (or its `payload`, sent by another rank) with its stored settings (`overrides`
    replacing some), else a UserError saying why it cannot resume."""
    payload = load_checkpoint(path) if payload is None else payload
    if payload.get("format") != FORMAT:
        raise UserError(f"{path} is not a detect training checkpoint; --resume needs a run's {WEIGHTS_DIR}/{LAST}")
    missing = [key for key in ("optimizer", "scaler", "scheduler", "rng") if payload.get(key) is None]
    if missing:
        raise UserError(f"{path} holds no {', '.join(missing)} state (a best.pt or snapshot?); resume from {LAST}")
    stored = TrainSettings.from_dict(payload["config"]["settings"], f"{path} (stored settings)")
    if payload["progress"]["epoch"] >= stored.epochs:
        raise UserError(f"{path}: the run already finished its {stored.epochs} epochs; nothing to resume")
    save_dir = path.parent.parent  # <project>/<name>/weights/last.pt
    settings = dataclasses.replace(stored, **overrides, exist_ok=True, project=str(save_dir.parent),
                                   name=save_dir.name)
    return ResumePoint(path, payload, settings)


def _latest_last(project: Path, missing_ok: bool = False) -> Path | None:
    """The most recently written <project>/*/weights/last.pt; None when there is none and `missing_ok`."""
    candidates = sorted(project.glob(f"*/{WEIGHTS_DIR}/{LAST}"), key=lambda path: path.stat().st_mtime)
    if not candidates and not missing_ok:
        raise UserError(f"--resume: no {project}/*/{WEIGHTS_DIR}/{LAST} to resume from; give the checkpoint's path")
    return candidates[-1] if candidates else None


def _given_checkpoint(path: Path, missing_ok: bool = False) -> Path | None:
    """--resume PATH: a checkpoint file, or a run folder (its weights/last.pt, what a stopped run's line names);
    None when neither is here and `missing_ok` (another node may hold it)."""
    if path.is_dir():
        path = path / WEIGHTS_DIR / LAST
        if not path.is_file() and not missing_ok:
            raise UserError(f"--resume {path.parent.parent}: a folder without {WEIGHTS_DIR}/{LAST}; give a run folder "
                            "or a last.pt")
    return path if path.is_file() or not missing_ok else None


def _elastic_last(project: Path, context: DistContext) -> Path | None:
    """After torchrun restarted the job (--max-restarts), the last.pt of this job's run folder, if any."""
    if context.restart_count == 0:
        return None
    folders = []
    for config in project.glob(f"*/{CONFIG_FILE}"):
        job = (yaml.safe_load(config.read_text()) or {}).get("job", {})
        if job.get("run_id") == context.run_id and (config.parent / WEIGHTS_DIR / LAST).is_file():
            folders.append(config.parent)
    if not folders:
        LOGGER.warning("restart %d of job %r: no %s of this job yet, starting again", context.restart_count,
                       context.run_id, LAST)
        return None
    latest = max(folders, key=lambda folder: (folder / WEIGHTS_DIR / LAST).stat().st_mtime)
    LOGGER.info("restart %d of job %r: resuming from %s", context.restart_count, context.run_id, latest)
    return latest / WEIGHTS_DIR / LAST


def find_resume_point(settings: TrainSettings, context: DistContext, resume: bool | str,
                      overrides: dict[str, Any]) -> ResumePoint | None:
    """Where this rank's storage says the run continues from: --resume (True: the latest last.pt of --project; a
    path: that checkpoint), else this torchrun job's last.pt after an elastic restart, else nowhere (a new run).
    In a job of several ranks a checkpoint this rank cannot see may be on another node's disk: share_resume_point
    settles it."""
    project = Path(settings.project)
    if resume is True:
        path = _latest_last(project, missing_ok=context.distributed)
    elif resume:
        path = _given_checkpoint(Path(resume), missing_ok=context.distributed)
    else:
        path = _elastic_last(project, context)
    return None if path is None else _resumable(path, overrides)


def share_resume_point(local: ResumePoint | None, context: DistContext, resume: bool | str,
                       overrides: dict[str, Any]) -> tuple[ResumePoint | None, DistContext]:
    """Agree on one resume point for the whole job. On storage that is not shared only some nodes see the run
    folder: the rank that holds the newest checkpoint of the job becomes its main rank (it goes on writing that
    folder, whatever its number) and sends the checkpoint to the ranks that lack it. Nothing to do in one process."""
    if not context.distributed:
        return local, context
    seen = all_gather_objects(context, local.payload["progress"]["iteration"] if local else -1)
    newest = max(range(context.world_size), key=lambda rank: (seen[rank], -rank))
    if seen[newest] < 0:
        if resume:
            raise UserError(f"--resume {'' if resume is True else resume}: no rank of the job can read a checkpoint "
                            f"to resume from")
        return None, context
    context = dataclasses.replace(context, main_rank=newest)
    if min(seen) == seen[newest]:  # every rank read the same checkpoint (shared storage)
        return local, context
    path, payload = broadcast_object(context, (str(local.path), local.payload) if context.is_main else None)
    point = local if local is not None and seen[context.rank] == seen[newest] else _resumable(Path(path), overrides,
                                                                                              payload)
    if context.is_main:
        LOGGER.info("rank %d holds %s and sends it to the ranks that cannot see it", newest, path)
    return point, context


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """One run's folder; only rank 0 writes in it."""

    save_dir: Path

    @property
    def weights_dir(self) -> Path:
        return self.save_dir / WEIGHTS_DIR

    @property
    def last_path(self) -> Path:
        return self.weights_dir / LAST

    @property
    def best_path(self) -> Path:
        return self.weights_dir / BEST

    def epoch_path(self, epoch: int) -> Path:
        """--save-period's snapshot after `epoch` epochs."""
        return self.weights_dir / f"epoch{epoch}.pt"

    @classmethod
    def open(cls, settings: TrainSettings, context: DistContext, resume: bool) -> RunFolder:
        """Rank 0 makes project/name (exp, exp2, ... unless exist_ok or resuming) and tells the other ranks."""
        save_dir = None
        if context.is_main:
            save_dir = make_run_dir(settings.project, settings.name, settings.exist_ok or resume)
            (save_dir / WEIGHTS_DIR).mkdir(exist_ok=True)
            for leftover in (save_dir / WEIGHTS_DIR).glob(".*.tmp"):  # a save killed half-way left its temp file
                leftover.unlink()
        return cls(Path(broadcast_object(context, str(save_dir))))

    def write_config(self, settings: TrainSettings, hyp: Hyp, data: DataConfig, context: DistContext) -> Path:
        """config.yaml: the options, the hyp, the dataset as resolved, and the torchrun job it belongs to."""
        resolved = {
            "settings": settings.to_dict(),
            "hyp": dataclasses.asdict(hyp),
            "data": {"source": str(data.source), "root": str(data.root), "names": list(data.names),
                     "splits": {split: [str(path) for path in paths] for split, paths in data.splits.items()}},
            "job": {"run_id": context.run_id, "world_size": context.world_size},
        }
        path = self.save_dir / CONFIG_FILE
        path.write_text(yaml.safe_dump(resolved, sort_keys=False))
        return path

    def write_problems(self, problems: list[str], split: LabelledSplit) -> Path | None:
        """bad_files.txt: what the label check skipped or fixed, and the files that failed during the run."""
        check_lines = split.details_file.read_text().splitlines() if split.details_file else []
        if not check_lines and not problems:
            return None
        path = self.save_dir / "bad_files.txt"
        sections = [f"# label check ({len(check_lines)} lines, from {split.details_file})", *check_lines,
                    f"# during the run ({len(problems)} unreadable; training used other samples, validation left them out)",
                    *problems]
        path.write_text("\n".join(sections) + "\n")
        if problems:
            LOGGER.warning("%d files could not be read during the run; see %s", len(problems), path)
        return path
