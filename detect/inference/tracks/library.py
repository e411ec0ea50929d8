"""The one adapter to the `trackers` library (Roboflow's, Apache-2.0: ByteTrack, OC-SORT, BoT-SORT): a tracker made
from our settings, and one frame's detections in and tracked boxes out, as arrays.

`trackers` asks pip for opencv-python, which would put a second cv2 beside our opencv-python-headless; it is installed
without its dependencies and the `track` extra brings the ones it imports (docs/usage.md, "Tracking")."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from detect.errors import UserError
from detect.inference.tracks.settings import TrackerSettings

INSTALL = 'pip install -e ".[track]" && pip install --no-deps "trackers==2.6.1"'
CLASS_NAMES = {"bytetrack": "ByteTrackTracker", "ocsort": "OCSORTTracker", "botsort": "BoTSORTTracker"}


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise UserError(f"tracking needs the trackers library ({error.name or module} is missing): {INSTALL}") from None


class LibraryTracker:
    """One `trackers` tracker: update((n, 6) rows) gives the confirmed tracks' rows and ids."""

    def __init__(self, settings: TrackerSettings, frame_rate: float) -> None:
        self.settings = settings
        self.supervision = _import("supervision")
        tracker_class = getattr(_import("trackers"), CLASS_NAMES[settings.tracker])
        self.tracker = tracker_class(frame_rate=frame_rate, **settings.library_options())
        self.uses_frames = settings.tracker == "botsort" and settings.enable_cmc  # BoT-SORT's camera motion estimate

    def update(self, rows: np.ndarray, frame: np.ndarray | None, timestamp: float | None) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
        """(n, 6) float [x1, y1, x2, y2, score, class] detections of one frame -> the (m, 6) rows of the confirmed
        tracks among them and their (m,) int64 ids (from 1); `frame` (BGR) only where the tracker reads it."""
        detections = self.supervision.Detections(xyxy=rows[:, :4].astype(np.float32),
                                                 confidence=rows[:, 4].astype(np.float32),
                                                 class_id=rows[:, 5].astype(int))
        tracked = self.tracker.update(detections, frame if self.uses_frames else None, timestamp)
        ids = np.asarray(tracked.tracker_id if tracked.tracker_id is not None else [], np.int64)
        confirmed = ids >= 0  # the library gives -1 to a track not yet confirmed (minimum_consecutive_frames)
        out = np.zeros((int(confirmed.sum()), 6), np.float32)
        if len(out):
            out[:, :4] = tracked.xyxy[confirmed]
            out[:, 4] = tracked.confidence[confirmed]
            out[:, 5] = tracked.class_id[confirmed]
        return out, ids[confirmed] + 1  # MOTChallenge's ids are positive
