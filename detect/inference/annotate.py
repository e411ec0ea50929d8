"""Detections drawn on images: one annotated image (predict), and a grid of validation predictions (val, train)."""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np
import torch

from detect.atomic_file import write_image
from detect.data.dataset_plots import class_colour
from detect.data.images.letterbox import fitted_size
from detect.data.images.load import read_image
from detect.errors import UserError
from detect.inference.detector import Detections

FONT = cv2.FONT_HERSHEY_SIMPLEX  # built into OpenCV: no font file, no download
GRID_TILE = 320  # pixels, the long side of each image in a grid
GRID_CONFIDENCE = 0.25  # only confident boxes are drawn in the grid (yolov5's plot threshold)


def annotate(image: np.ndarray, detections: Detections, line_thickness: int = 3, hide_labels: bool = False,
             hide_conf: bool = False) -> np.ndarray:
    """A copy of a BGR image with each detection's box and, unless hidden, its class name and score."""
    canvas = image.copy()
    text_scale, text_thickness = line_thickness / 3, max(line_thickness - 1, 1)
    for (x1, y1, x2, y2), score, cls in zip(detections.boxes.round().astype(int).tolist(),
                                            detections.scores.tolist(), detections.classes.tolist()):
        colour = class_colour(cls)
        cv2.rectangle(canvas, (x1, y1), (x2, y2), colour, line_thickness, cv2.LINE_AA)
        if hide_labels:
            continue
        label = detections.names[cls] if hide_conf else f"{detections.names[cls]} {score:.2f}"
        (width, height), _ = cv2.getTextSize(label, FONT, text_scale, text_thickness)
        top = y1 - height - 3 if y1 - height - 3 >= 0 else y1  # the label sits above the box, inside it at the top
        cv2.rectangle(canvas, (x1, top), (x1 + width, top + height + 3), colour, -1, cv2.LINE_AA)
        cv2.putText(canvas, label, (x1, top + height + 1), FONT, text_scale, (255, 255, 255), text_thickness,
                    cv2.LINE_AA)
    return canvas


def plot_predictions(images: list[tuple[Path, torch.Tensor]], names: tuple[str, ...], path: Path) -> Path:
    """A grid of images (read from their paths) with their (n, 6) [x1, y1, x2, y2, score, class] detections in
    original pixels, those above GRID_CONFIDENCE drawn; an image that cannot be read is left out."""
    tiles = []
    for image_path, rows in images:
        try:
            image = read_image(image_path)
        except OSError:
            continue
        confident = Detections(rows[rows[:, 4] >= GRID_CONFIDENCE], names, image.shape[:2])
        scale = GRID_TILE / max(image.shape[:2])
        drawn = annotate(image, confident, line_thickness=max(round(2 / scale), 1))
        tile = np.full((GRID_TILE, GRID_TILE, 3), 255, np.uint8)
        height, width = fitted_size(*image.shape[:2], scale)
        resized = cv2.resize(drawn, (width, height))
        tile[:resized.shape[0], :resized.shape[1]] = resized
        tiles.append(tile)
    if not tiles:
        return path
    columns = math.ceil(math.sqrt(len(tiles)))
    rows = [np.concatenate(tiles[start:start + columns] + [np.full_like(tiles[0], 255)] *
                           (columns - len(tiles[start:start + columns])), axis=1)
            for start in range(0, len(tiles), columns)]
    if not write_image(path, np.concatenate(rows, axis=0)):
        raise UserError(f"{path}: cannot write the predictions plot")
    return path
