"""The training checkpoint: everything that makes a resumed run continue exactly, as tensors and plain values."""

from __future__ import annotations

import dataclasses
import datetime
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from detect.backend import Backend
from detect.errors import UserError

FORMAT = "detect-train-1"


@dataclasses.dataclass
class Progress:
    """Counters that a resumed run continues from (all plain numbers)."""

    epoch: int = 0  # epochs completed
    iteration: int = 0  # batches seen since the start, across epochs (drives warmup and multi-scale)
    last_optimizer_step: int = -1  # the iteration of the last optimizer step (gradient accumulation)
    best_fitness: float = 0.0
    best_epoch: int = -1
    nonfinite_steps: int = 0  # steps skipped for a non-finite loss, whole run


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


def resumable(payload: dict, path: Path) -> dict:
    """The payload if it can resume a run, else a UserError saying why."""
    if payload.get("format") != FORMAT:
        raise UserError(f"{path} is not a detect training checkpoint; --resume needs a run's weights/last.pt")
    missing = [key for key in ("optimizer", "scaler", "scheduler", "rng") if payload.get(key) is None]
    if missing:
        raise UserError(f"{path} holds no {', '.join(missing)} state (a best.pt or snapshot?); resume from last.pt")
    return payload


def latest_last_checkpoint(project: Path) -> Path:
    """The most recently written runs/<project>/*/weights/last.pt."""
    candidates = sorted(project.glob("*/weights/last.pt"), key=lambda path: path.stat().st_mtime)
    if not candidates:
        raise UserError(f"--resume: no {project}/*/weights/last.pt to resume from; give the checkpoint's path")
    return candidates[-1]
