"""What a run records each epoch: a row of results.csv (mirrored to TensorBoard when it is installed), the one log line,
and results.png drawn from the csv (ours or yolov5's)."""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path

from detect.atomic_file import append_text, write_text
from detect.errors import UserError
from detect.evaluation.evaluator import Metrics
from detect.evaluation.metric_plots import save_figure
from detect.training.epoch import EpochStats

LOGGER = logging.getLogger(__name__)

COLUMNS = (
    "epoch", "train/box_loss", "train/obj_loss", "train/cls_loss",
    "metrics/precision", "metrics/recall", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95",
    "x/lr0", "x/lr1", "x/lr2", "train/img_per_s", "memory/host_peak_gb", "memory/device_peak_gb",
    # Numerics: steps skipped for a non-finite loss or non-finite gradients, the gradient norm before clipping,
    # the AMP loss scale (empty without loss scaling).
    "train/nonfinite_loss_steps", "train/nonfinite_grad_steps", "train/grad_norm_mean", "train/grad_norm_max",
    "amp/loss_scale_min", "amp/loss_scale_last",
    "train/distill_loss",  # with a teacher (--teacher), in the epochs its term is on; last, to keep yolov5's columns
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
    if len(stats.losses) > 3:
        row["train/distill_loss"] = stats.losses[3]
    if device_peak_bytes is not None:
        row["memory/device_peak_gb"] = device_peak_bytes / 1e9
    if metrics is not None:
        row.update({"metrics/precision": metrics.precision, "metrics/recall": metrics.recall,
                    "metrics/mAP_0.5": metrics.map50, "metrics/mAP_0.5:0.95": metrics.map50_95})
    return row


def epoch_line(epoch: int, epochs: int, row: dict[str, float]) -> str:
    """The one summary line per epoch."""
    taught = f" distill {row['train/distill_loss']:.4f}" if "train/distill_loss" in row else ""
    line = (f"epoch {epoch + 1}/{epochs}: box {row['train/box_loss']:.4f} obj {row['train/obj_loss']:.4f} "
            f"cls {row['train/cls_loss']:.4f}{taught}, {row['train/img_per_s']:.1f} img/s")
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
