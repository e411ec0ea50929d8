"""What a training run is once set up (`Run`, which build.py fills and the trainer, the hooks and the trackers read):
its settings, folder, model, step parts, counters and the hooks' control, its validation, and what it records: the
per-epoch results log (results.csv, TensorBoard events, results.png) and the wall time of each phase."""

from __future__ import annotations

import collections
import contextlib
import csv
import dataclasses
import io
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from detect import backend as backends
from detect.atomic_file import append_text, write_text
from detect.config import Hyp
from detect.data import Loader
from detect.errors import UserError
from detect.evaluation.evaluator import CocoEvaluator, Metrics
from detect.evaluation.metric_plots import save_figure
from detect.evaluation.val_loop import Predict
from detect.inference.predictor import Predictor
from detect.inference.slicing import SlicedPredictor, SliceSettings
from detect.models import DetectionModel
from detect.models.safe_io import save_checkpoint
from detect.models.weights import model_state
from detect.training.distributed import DistContext
from detect.training.epoch import Control, EpochStats, TrainingParts
from detect.training.optim import IterationPlan
from detect.training.resume import Counters, TrainingCheckpoint, rng_state
from detect.training.run_folder import RunFolder
from detect.training.settings import TrainSettings

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Validation:
    """What validates the run on each rank: its shard of the val batches, the weights it scores (the main rank's EMA
    module; a copy on the other ranks, which the main rank's EMA weights are sent to before each validation), and on
    the main rank alone the COCO evaluator."""

    loader: Loader
    model: DetectionModel
    evaluator: CocoEvaluator | None
    slicing: SliceSettings | None = None  # a tiled run's: the weights run on windows of each full-resolution image

    def predict(self, backend: backends.Backend, weights: Predict | None = None) -> Predict:
        """What scores the weights (the run's, else `weights`, e.g. best.pt's fused model): their predict, or
        (slicing) windows of each image run through it."""
        predict = self.model.predict if weights is None else weights
        if self.slicing is None:
            return predict
        return SlicedPredictor(Predictor(predict), backend, self.slicing, self.model.max_stride)


@dataclasses.dataclass(frozen=True)
class Run:
    """What one training run holds once set up, on every rank; `parts.ema` and `results` on the main rank only."""

    settings: TrainSettings
    hyp: Hyp
    folder: RunFolder
    train_loader: Loader
    model: DetectionModel  # what checkpoints save; the steps call parts.train_model (DDP around it under torchrun)
    parts: TrainingParts
    plan: IterationPlan
    scheduler: torch.optim.lr_scheduler.LambdaLR
    counters: Counters  # where the run stands: the epoch loop and the trainer advance them, last.pt keeps them
    control: Control  # what the hooks ask of the loop (stop, save, end the run)
    validation: Validation
    results: ResultsLog | None  # results.csv, written by the main rank
    phases: PhaseTimes
    tracking: dict[str, str] = dataclasses.field(default_factory=dict)  # experiment trackers' ids, kept in last.pt

    @property
    def backend(self) -> backends.Backend:
        """This rank's device (the steps' own: parts.backend)."""
        return self.parts.backend

    @property
    def context(self) -> DistContext:
        """This rank in its job (the steps' own: parts.context)."""
        return self.parts.context

    def checkpoint(self, full: bool) -> TrainingCheckpoint:
        """The run as a checkpoint; `full` adds what resuming needs (optimizer, scaler, scheduler, every RNG)."""
        ema, parts = self.parts.ema, self.parts
        return TrainingCheckpoint(
            model=model_state(self.model), ema=model_state(ema.module), ema_updates=ema.updates,
            counters=self.counters, settings=self.settings, hyp=self.hyp,
            optimizer=parts.optimizer.state_dict() if full else None, scaler=parts.scaler.state_dict() if full else None,
            scheduler=self.scheduler.state_dict() if full else None, rng=rng_state(self.backend) if full else None,
            tracking=dict(self.tracking) if full else {})

    def save_last(self) -> None:
        """last.pt: the run where the counters stand, with all a resume needs (main rank)."""
        save_checkpoint(self.folder.last_path, self.checkpoint(full=True).to_payload())


COLUMNS = (
    "epoch", "train/box_loss", "train/obj_loss", "train/cls_loss",
    "metrics/precision", "metrics/recall", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95",
    "x/lr0", "x/lr1", "x/lr2", "train/img_per_s", "memory/host_peak_gb", "memory/device_peak_gb",
    # Numerics: steps skipped for a non-finite loss or non-finite gradients, the gradient norm before clipping,
    # the AMP loss scale (empty without loss scaling).
    "train/nonfinite_loss_steps", "train/nonfinite_grad_steps", "train/grad_norm_mean", "train/grad_norm_max",
    "amp/loss_scale_min", "amp/loss_scale_last",
)
PLOTTED = COLUMNS[1:8]


class ResultsLog:
    """Appends one row per epoch to save_dir/results.csv, mirrors it to TensorBoard when tensorboard is installed."""

    def __init__(self, save_dir: Path, first_epoch: int = 0) -> None:
        """A resumed run (first_epoch > 0) keeps the rows of the epochs before it and drops any later ones."""
        self.path = save_dir / "results.csv"
        kept = [row for row in self.rows() if row["epoch"] < first_epoch] if first_epoch and self.path.is_file() else []
        write_text(self.path, _csv([COLUMNS, *([_format(row.get(column)) for column in COLUMNS] for row in kept)]))
        self.writer = _tensorboard_writer(save_dir)

    def add(self, row: dict[str, float]) -> None:
        """Write one epoch's values (keys from COLUMNS; a missing one is written empty)."""
        append_text(self.path, _csv([[_format(row.get(column)) for column in COLUMNS]]))
        if self.writer is not None:
            for column in COLUMNS[1:]:
                if row.get(column) is not None:
                    self.writer.add_scalar(column, row[column], int(row["epoch"]))
            self.writer.flush()

    def rows(self) -> list[dict[str, float]]:
        """Every row written so far, as floats (an empty cell is None)."""
        with open(self.path, newline="") as handle:
            return [{key: float(value) if value else None for key, value in row.items()}
                    for row in csv.DictReader(handle)]

    def plot(self) -> Path:
        """results.png: one panel per loss and metric against the epoch."""
        return plot_results(self.path)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def plot_results(csv_file: str | Path) -> Path:
    """results.png beside a results.csv, ours or yolov5's (whose headers are padded with spaces): one panel per
    loss and metric against the epoch. yolov5's `from utils.plots import plot_results`."""
    from matplotlib.figure import Figure

    csv_file = Path(csv_file)
    if not csv_file.is_file():
        raise UserError(f"{csv_file}: no such file (a run's results.csv, e.g. runs/train/exp/results.csv)")
    with open(csv_file, newline="") as handle:
        rows = [{key.strip(): value.strip() for key, value in row.items() if key is not None}
                for row in csv.DictReader(handle)]
    missing = [column for column in ("epoch", *PLOTTED) if rows and column not in rows[0]]
    if missing:
        raise UserError(f"{csv_file}: no column {missing[0]!r}; not a results.csv of detect or yolov5")
    figure = Figure(figsize=(14, 6), dpi=100)
    for axis, column in zip(figure.subplots(2, 4).ravel(), PLOTTED):
        points = [(float(row["epoch"]), float(row[column])) for row in rows if row[column]]
        axis.plot([epoch for epoch, _ in points], [value for _, value in points], marker=".")
        axis.set_title(column)
        axis.set_xlabel("epoch")
    figure.tight_layout()
    return save_figure(figure, csv_file.with_name("results.png"))


def epoch_row(epoch: int, stats: EpochStats, metrics: Metrics | None, host_peak_bytes: int,
              device_peak_bytes: int | None) -> dict[str, float]:
    """One results.csv row; metrics are empty in epochs without validation (--noval)."""
    row = {"epoch": epoch, "train/box_loss": stats.losses[0], "train/obj_loss": stats.losses[1],
           "train/cls_loss": stats.losses[2], "train/img_per_s": stats.images / max(stats.seconds, 1e-9),
           "memory/host_peak_gb": host_peak_bytes / 1e9}
    row.update({f"x/lr{index}": lr for index, lr in enumerate(stats.learning_rates[:3])})
    numerics = {"train/nonfinite_loss_steps": stats.nonfinite_steps,
                "train/nonfinite_grad_steps": stats.nonfinite_grad_steps, "train/grad_norm_mean": stats.grad_norm_mean,
                "train/grad_norm_max": stats.grad_norm_max, "amp/loss_scale_min": stats.loss_scale_min,
                "amp/loss_scale_last": stats.loss_scale_last}
    row.update({column: value for column, value in numerics.items() if value is not None})
    if device_peak_bytes is not None:
        row["memory/device_peak_gb"] = device_peak_bytes / 1e9
    if metrics is not None:
        row.update({"metrics/precision": metrics.precision, "metrics/recall": metrics.recall,
                    "metrics/mAP_0.5": metrics.map50, "metrics/mAP_0.5:0.95": metrics.map50_95})
    return row


def epoch_line(epoch: int, epochs: int, row: dict[str, float]) -> str:
    """The one summary line per epoch."""
    line = (f"epoch {epoch + 1}/{epochs}: box {row['train/box_loss']:.4f} obj {row['train/obj_loss']:.4f} "
            f"cls {row['train/cls_loss']:.4f}, {row['train/img_per_s']:.1f} img/s")
    if "metrics/mAP_0.5" in row:
        line += (f", P {row['metrics/precision']:.3f} R {row['metrics/recall']:.3f} "
                 f"mAP50 {row['metrics/mAP_0.5']:.3f} mAP50-95 {row['metrics/mAP_0.5:0.95']:.3f}")
    return line


def _format(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e9 else f"{value:.6g}"


def _csv(rows) -> str:
    """`rows` as csv.writer writes them (comma-separated, quoted where needed, each line ended by CR LF)."""
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    return text.getvalue()


def _tensorboard_writer(save_dir: Path):
    """A SummaryWriter in save_dir, or None when tensorboard is not installed (it is optional)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        LOGGER.info("tensorboard is not installed: no TensorBoard events (pip install tensorboard)")
        return None
    return SummaryWriter(log_dir=str(save_dir))


class PhaseTimes:
    """Wall seconds per phase of a run (label check, AutoAnchor, training, validation, saves, final evaluation,
    plots), logged at its end: where a run's time goes besides its training steps."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.started = time.perf_counter()

    @contextlib.contextmanager
    def time(self, phase: str) -> Iterator[None]:
        """Add the block's wall time to `phase`."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - started

    def line(self) -> str:
        """`phases: training 91.2 s, validation 12.0 s, ... (run 110.4 s)`, longest first."""
        parts = [f"{phase} {seconds:.1f} s" for phase, seconds in sorted(self.seconds.items(), key=lambda x: -x[1])]
        return f"phases: {', '.join(parts)} (run {time.perf_counter() - self.started:.1f} s)"
