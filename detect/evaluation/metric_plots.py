"""PNG plots of evaluation results, drawn on private matplotlib Figures (no pyplot global state)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from detect.atomic_file import replacing
from detect.data.dataset_plots import literal
from detect.evaluation.confusion import ConfusionMatrix
from detect.evaluation.evaluator import Metrics

# A confusion matrix of more classes shows the most counted ones: 100 names are as many as a plot can label, and a
# full matrix of 20,000 classes would not fit in memory (3.2 GB of counts, as much again to draw).
PLOTTED_CLASSES = 100


def save_figure(figure, path: Path | str) -> Path:
    """Render a Figure with the Agg canvas and write it as PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    path = Path(path)
    FigureCanvasAgg(figure)
    with replacing(path, keep_suffix=True) as temporary:
        figure.savefig(temporary, dpi=150)
    return path


def plot_pr_curve(metrics: Metrics, path: Path | str) -> Path:
    """Precision-recall curves at IoU 0.5 (COCOeval's interpolated precision), one thin line per class."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 6), tight_layout=True)
    axes = figure.add_subplot()
    recall = metrics.recall_thresholds
    curves = [(name, curve) for name, curve in zip(metrics.class_names, metrics.precision_curves) if curve[0] > -1]
    label_each = len(curves) <= 20  # a legend of 80 names hides the plot
    for (name, curve), ap50 in zip(curves, (a for a in metrics.class_ap50 if not math.isnan(a))):
        axes.plot(recall, curve, linewidth=1, label=f"{literal(name)} {ap50:.3f}" if label_each else None)
    if curves:
        mean = np.mean([curve for _, curve in curves], axis=0)
        axes.plot(recall, mean, linewidth=3, color="blue", label=f"all classes {metrics.map50:.3f} mAP@0.5")
    axes.set(xlabel="Recall", ylabel="Precision", xlim=(0, 1), ylim=(0, 1.01), title="Precision-Recall (IoU 0.5)")
    axes.legend(loc="lower left", fontsize=7)
    return save_figure(figure, path)


def plot_confusion_matrix(
    confusion: ConfusionMatrix, class_names: Sequence[str], path: Path | str, normalize: bool = True
) -> Path:
    """Heat map of the confusion matrix (columns: true class, rows: predicted, last: background): every class up to
    PLOTTED_CLASSES classes, else the PLOTTED_CLASSES most counted ones, in class order."""
    from matplotlib.figure import Figure

    if len(class_names) <= PLOTTED_CLASSES:
        classes, title = list(range(len(class_names))), ""
    else:
        seen = confusion.seen_classes()
        classes = sorted(seen[:PLOTTED_CLASSES])
        title = f", the {len(classes)} most counted of {len(seen)} classes seen" if len(seen) > len(classes) else ""
    values = confusion.normalized(classes) if normalize else confusion.matrix(classes).astype(np.float64)
    labels = [*(literal(class_names[index]) for index in classes), "background"]
    size = min(max(6.0, 0.16 * len(labels)), 20.0)
    figure = Figure(figsize=(size + 2, size), tight_layout=True)
    axes = figure.add_subplot()
    image = axes.imshow(np.where(values > 0, values, np.nan), cmap="Blues", vmin=0)
    figure.colorbar(image, ax=axes, fraction=0.046)
    ticks = range(len(labels))
    font = 8 if len(labels) < 30 else 4
    axes.set_xticks(ticks, labels, rotation=90, fontsize=font)
    axes.set_yticks(ticks, labels, fontsize=font)
    if len(labels) < 30:  # numbers in cells are readable only for small matrices
        for row, column in zip(*np.nonzero(values)):
            axes.text(column, row, f"{values[row, column]:.2f}" if normalize else str(int(values[row, column])),
                      ha="center", va="center", fontsize=7)
    axes.set(xlabel="True", ylabel="Predicted",
             title="Confusion matrix" + (" (normalised)" if normalize else "") + title)
    return save_figure(figure, path)
