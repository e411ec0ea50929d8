"""A run's teacher (--teacher), read and checked before anything is written: loaded as safely as --weights
(models/weights.py: ours by weights_only, yolov5's through the restricted unpickler), its file hashed so that a resumed
run can tell it is the same, and checked against the student it teaches: the same classes, the same levels (strides),
and for the logit term the same anchors per cell. `Distillation` is what the run's step follows (the teacher, the
term, its gain and the first epoch without it: docs/usage.md, "Distillation")."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import torch

from detect.errors import UserError
from detect.models import DetectionModel
from detect.models.spec import ModelSpec
from detect.models.weights import load_model, resolve_weights

MODES = ("feature", "logit", "both")  # --distill: the maps the heads read, the heads' outputs, or the two


def file_sha256(path: Path) -> str:
    """The file's sha256, hex."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    return f"{len(names)} class{'es' * (len(names) != 1)} ({shown}{', ...' if len(names) > 3 else ''})"


@dataclasses.dataclass(frozen=True)
class Teacher:
    """A teacher model (fp32, on the CPU, eval mode) and the file it came from, with its hash."""

    path: str
    sha256: str
    model: DetectionModel

    @classmethod
    def from_file(cls, weights: str) -> Teacher:
        """The teacher in `weights` (ours or a yolov5 .pt; a bad file is one line naming it, as for --weights)."""
        path = resolve_weights(weights)
        model = load_model(path)
        return cls(str(path), file_sha256(path), model)

    def check_fits(self, student: ModelSpec, names: list[str], mode: str) -> None:
        """A UserError naming what differs between the teacher and a new run's student (built from `student` for
        `names`): the classes, the levels the heads read, and (logit term) the anchors per cell."""
        ours = list(self.model.names)
        if ours != list(names):
            raise UserError(f"--teacher {self.path}: it predicts {_names(ours)}, the data {_names(list(names))}: a "
                            "teacher must be trained on the same classes, in the same order")
        with torch.device("meta"):  # the student's strides and anchors, nothing allocated
            detect = DetectionModel(student, len(names)).detect
        strides = self.model.detect.level_strides
        if strides != detect.level_strides:
            raise UserError(f"--teacher {self.path}: its head reads levels of strides {list(strides)}, the student's "
                            f"{list(detect.level_strides)}: distillation compares the maps level by level, so the "
                            "two need the same levels (e.g. both P3-P5, or both P3-P6)")
        if mode != "feature" and detect.na != self.model.detect.na:
            raise UserError(f"--distill {mode}: the teacher {self.path} has {self.model.detect.na} anchors per cell, "
                            f"the student {detect.na}; the logit term compares them one by one: use --distill feature")

    def check_unchanged(self, stored: dict | None, checkpoint: Path) -> None:
        """A resumed run's teacher must be the file it began with (its hash in last.pt's distillation entry)."""
        if stored is None:
            raise UserError(f"--resume {checkpoint}: the run was trained without a teacher; --teacher starts a new run")
        if stored["teacher_sha256"] != self.sha256:
            raise UserError(f"--resume {checkpoint}: the teacher {self.path} changed since the run began (sha256 "
                            f"{self.sha256[:12]}, the run's {stored['teacher_sha256'][:12]}): give the run's teacher "
                            "with --teacher, or start a new run")


@dataclasses.dataclass(frozen=True)
class Distillation:
    """What a run's distillation follows: its teacher, the term (MODES), the term's gain, and the first epoch
    trained without it (the run's epochs: on to the end)."""

    teacher: Teacher
    mode: str
    gain: float
    until_epoch: int

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UserError(f"--distill {self.mode}: choose one of {', '.join(MODES)}")
