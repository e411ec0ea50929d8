"""PNG plots: label statistics of a split and a grid of an augmented batch with its boxes."""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

from detect.atomic_file import replacing, write_image
from detect.data.batch import Batch
from detect.data.records import ImageRecord
from detect.ops.boxes import xywhn_to_xyxy


def literal(text: str) -> str:
    """A class name as matplotlib draws it as written: '$' escaped, so that '$\\frac{$' is not parsed as math (which
    fails the whole plot)."""
    return text.replace("$", r"\$")


def plot_label_stats(records: list[ImageRecord], names: list[str], path: Path) -> Path:
    """Class counts, box-centre and box-size histograms (normalised coordinates) as one PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # here: matplotlib is slow to import (a plot's cost)
    from matplotlib.figure import Figure

    classes = np.concatenate([record.classes for record in records] or [np.zeros(0, np.int64)])
    boxes = np.concatenate([record.boxes for record in records] or [np.zeros((0, 4), np.float32)])
    figure = Figure(figsize=(12, 4), dpi=100)
    FigureCanvasAgg(figure)
    counts_axis, centre_axis, size_axis = figure.subplots(1, 3)
    counts = np.bincount(classes, minlength=len(names))
    present = np.flatnonzero(counts)  # one bar per class with boxes: 20,000 empty bars would take minutes to draw
    counts_axis.bar(present, counts[present])
    counts_axis.set_xlim(-0.5, len(names) - 0.5)
    counts_axis.set_title(f"{len(classes)} boxes, {len(records)} images")
    if len(names) <= 30:
        counts_axis.set_xticks(np.arange(len(names)), [literal(name) for name in names], rotation=90, fontsize=7)
    centre_axis.hist2d(boxes[:, 0], boxes[:, 1], bins=50, range=[[0, 1], [0, 1]], cmap="Blues")
    centre_axis.set(title="box centre", xlabel="x", ylabel="y")
    centre_axis.invert_yaxis()
    size_axis.hist2d(boxes[:, 2], boxes[:, 3], bins=50, range=[[0, 1], [0, 1]], cmap="Blues")
    size_axis.set(title="box size", xlabel="width", ylabel="height")
    figure.tight_layout()
    with replacing(path, keep_suffix=True) as temporary:
        figure.savefig(temporary)
    return path


def class_colour(class_index: int) -> tuple[int, int, int]:
    """A stable, distinct BGR colour per class (golden-ratio hue steps)."""
    hue = int((class_index * 0.618034 % 1) * 179)
    pixel = cv2.cvtColor(np.uint8([[[hue, 220, 255]]]), cv2.COLOR_HSV2BGR)[0, 0]
    return int(pixel[0]), int(pixel[1]), int(pixel[2])


def plot_batch(batch: Batch, names: list[str], path: Path, max_images: int = 16) -> Path:
    """A grid of up to max_images batch images with their target boxes and class names, as PNG."""
    count = min(len(batch), max_images)
    columns = math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    height, width = batch.images.shape[2:]
    grid = np.full((rows * height, columns * width, 3), 255, np.uint8)
    targets = batch.targets.numpy()
    corners = xywhn_to_xyxy(targets[:, 2:6], width, height).astype(int)
    for index in range(count):
        tile = np.ascontiguousarray(batch.images[index].numpy().transpose(1, 2, 0)[:, :, ::-1])
        mine = targets[:, 0] == index
        for class_index, (x1, y1, x2, y2) in zip(targets[mine, 1].astype(int).tolist(), corners[mine].tolist()):
            colour = class_colour(class_index)
            cv2.rectangle(tile, (x1, y1), (x2, y2), colour, 2)
            label = names[class_index] if class_index < len(names) else str(class_index)
            cv2.putText(tile, label, (x1, max(y1 - 3, 10)), cv2.FONT_HERSHEY_SIMPLEX, 0.4, colour, 1)
        row, column = divmod(index, columns)
        grid[row * height:(row + 1) * height, column * width:(column + 1) * width] = tile
    if not write_image(path, grid):
        raise OSError(f"{path}: cannot write the batch plot")
    return path
