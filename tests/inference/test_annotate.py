"""The validation predictions grid: confident boxes drawn in their class colour on each image, tiled."""

from __future__ import annotations

import cv2
import numpy as np
import torch

from detect.data.dataset_plots import class_colour
from detect.inference.annotate import GRID_TILE, plot_predictions


def test_grid_draws_confident_boxes_only(tmp_path):
    paths = []
    for index in range(2):
        path = tmp_path / f"{index}.png"
        cv2.imwrite(str(path), np.zeros((160, 320, 3), np.uint8))  # scale 1: the tile is the image
        paths.append(path)
    confident = torch.tensor([[40.0, 40.0, 120.0, 120.0, 0.9, 1.0]])
    faint = torch.tensor([[200.0, 40.0, 280.0, 120.0, 0.1, 2.0]])
    grid = cv2.imread(str(plot_predictions([(paths[0], confident), (paths[1], faint), (tmp_path / "gone.png",
                                                                                      confident)],
                                           ("a", "b", "c"), tmp_path / "val_predictions.jpg")))
    assert grid.shape == (GRID_TILE, 2 * GRID_TILE, 3)  # the unreadable third image is left out
    colour = np.array(class_colour(1), np.int32)
    assert np.abs(grid[80, 40].astype(np.int32) - colour).max() < 40  # the left edge of the confident box
    assert grid[80, GRID_TILE + 200].max() < 40  # the faint box of the second image is not drawn
