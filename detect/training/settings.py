"""What a training run was asked to do: yolov5's train.py options as one frozen, checked dataclass."""

from __future__ import annotations

import dataclasses
from typing import Any

from detect.config import from_mapping
from detect.errors import UserError


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """The options of `python -m detect.train`, with yolov5's names and defaults (batch_size is global)."""

    cfg: str | None = None
    weights: str | None = None
    data: str = "shapes.yaml"
    hyp: str = "scratch-low.yaml"
    epochs: int = 100
    batch_size: int = 16
    imgsz: int = 640
    device: str = "auto"
    workers: int = 8
    project: str = "runs/train"
    name: str = "exp"
    exist_ok: bool = False
    seed: int = 0
    noval: bool = False
    nosave: bool = False
    noautoanchor: bool = False
    patience: int = 100
    freeze: tuple[int, ...] = (0,)
    save_period: int = -1
    cos_lr: bool = False
    label_smoothing: float = 0.0
    multi_scale: bool = False
    sync_bn: bool = False
    optimizer: str = "SGD"
    cache: str | None = None
    single_cls: bool = False
    rect: bool = False
    amp: bool | None = None
    npu_jit_compile: bool | None = None  # None keeps torch_npu's default (NPU.md §1 #5)
    npu_allow_hf32: bool | None = None
    dist_timeout: float = 1800.0
    progress: bool = True

    def __post_init__(self) -> None:
        checks = {
            "--epochs": self.epochs >= 1, "--batch-size": self.batch_size >= 1, "--imgsz": self.imgsz >= 32,
            "--workers": self.workers >= 0, "--patience": self.patience >= 0, "--dist-timeout": self.dist_timeout > 0,
            "--label-smoothing": 0.0 <= self.label_smoothing < 1.0,
            "--freeze": all(layer >= 0 for layer in self.freeze),
        }
        for flag, ok in checks.items():
            if not ok:
                raise UserError(f"{flag} {getattr(self, flag[2:].replace('-', '_'))!r} is out of range")
        if self.rect and self.multi_scale:
            raise UserError("--rect and --multi-scale do not go together: a rectangular batch has its own shape")
        if self.optimizer not in ("SGD", "Adam", "AdamW"):
            raise UserError(f"--optimizer {self.optimizer!r}: choose SGD, Adam or AdamW")

    def to_dict(self) -> dict[str, Any]:
        """Plain values only (a checkpoint and the run's yaml hold this)."""
        values = dataclasses.asdict(self)
        values["freeze"] = list(self.freeze)
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str) -> TrainSettings:
        """Rebuild from to_dict's output (e.g. a checkpoint's stored settings)."""
        values = dict(values)
        values["freeze"] = tuple(values.get("freeze", (0,)))
        return from_mapping(cls, values, source)
