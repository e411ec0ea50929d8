"""Tracks drawn on a frame: each box in its id's colour with 'id class score', and its short trail of centres."""

from __future__ import annotations

import cv2
import numpy as np

from detect.data.dataset_plots import class_colour
from detect.inference.tracks.streams import Tracks

FONT = cv2.FONT_HERSHEY_SIMPLEX  # built into OpenCV: no font file


def draw_tracks(image: np.ndarray, tracks: Tracks, line_thickness: int = 2) -> np.ndarray:
    """A copy of a BGR frame with each track's box, label and trail (its colour follows its id, not its class)."""
    canvas = image.copy()
    scale, text_thickness = line_thickness / 3, max(line_thickness - 1, 1)
    for track_id, (x1, y1, x2, y2), score, cls in zip(tracks.ids.tolist(), tracks.boxes.round().astype(int).tolist(),
                                                      tracks.scores.tolist(), tracks.classes.tolist()):
        colour = class_colour(track_id)
        trail = tracks.trails.get(track_id)
        if trail is not None and len(trail) > 1:
            cv2.polylines(canvas, [trail.round().astype(np.int32).reshape(-1, 1, 2)], False, colour, line_thickness,
                          cv2.LINE_AA)
        cv2.rectangle(canvas, (x1, y1), (x2, y2), colour, line_thickness, cv2.LINE_AA)
        label = f"{track_id} {tracks.names[cls]} {score:.2f}"
        (width, height), _ = cv2.getTextSize(label, FONT, scale, text_thickness)
        top = y1 - height - 3 if y1 - height - 3 >= 0 else y1
        cv2.rectangle(canvas, (x1, top), (x1 + width, top + height + 3), colour, -1, cv2.LINE_AA)
        cv2.putText(canvas, label, (x1, top + height + 1), FONT, scale, (255, 255, 255), text_thickness, cv2.LINE_AA)
    return canvas
