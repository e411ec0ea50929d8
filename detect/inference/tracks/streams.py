"""Tracking state per stream: each stream (a video, a folder of frames, a camera) has its own tracker, frames in and
tracks out, reset on demand. A stream's frames are tracked in the pixels of its first frame: a frame of another size
(a camera that changes resolution) has its boxes scaled to them, counted and said once, so its tracks go on."""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Hashable

import cv2
import numpy as np

from detect.errors import UserError
from detect.inference.tracks.library import LibraryTracker
from detect.inference.tracks.settings import TrackerSettings

LOGGER = logging.getLogger(__name__)
TRAIL_FRAMES = 30  # the centres each track's trail keeps (one second at 30 fps)


@dataclasses.dataclass(frozen=True)
class Tracks:
    """One frame's tracked objects in its own pixels: rows (n, 6) [x1, y1, x2, y2, score, class] float32 and their
    ids (n,) int64 (from 1, unique in their stream); `trails` maps each id to its last centres (k, 2), oldest first."""

    rows: np.ndarray
    ids: np.ndarray
    names: tuple[str, ...]
    trails: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def boxes(self) -> np.ndarray:
        return self.rows[:, :4]

    @property
    def scores(self) -> np.ndarray:
        return self.rows[:, 4]

    @property
    def classes(self) -> np.ndarray:
        return self.rows[:, 5].astype(np.int64)


class StreamTracker:
    """One stream's tracker: update(detections of a frame) -> its Tracks."""

    def __init__(self, settings: TrackerSettings, names: tuple[str, ...], frame_rate: float = 30.0) -> None:
        self.settings, self.names = settings, names
        self.tracker = LibraryTracker(settings, frame_rate)
        self.size: tuple[int, int] | None = None  # (h, w) of the stream's first frame: the tracker's pixels
        self.resized = 0  # frames of another size, scaled to `size`
        self.trails: dict[int, collections.deque] = {}
        self.last_seen: dict[int, int] = {}
        self.frames = 0

    def update(self, rows: np.ndarray, image: np.ndarray, timestamp: float | None = None) -> Tracks:
        """(n, 6) [x1, y1, x2, y2, score, class] detections of a (h, w, 3) BGR frame, in its pixels -> its Tracks;
        `timestamp` (seconds) lets the tracker see frames skipped in between (None: one frame after the last)."""
        height, width = image.shape[:2]
        self.size = self.size or (height, width)
        gain = np.array([self.size[1] / width, self.size[0] / height] * 2, np.float32)
        if (height, width) != self.size:
            if not self.resized:
                LOGGER.warning("a frame of %dx%d in a stream of %dx%d: its boxes are tracked at %dx%d", width, height,
                               self.size[1], self.size[0], self.size[1], self.size[0])
            self.resized += 1
            image = cv2.resize(image, self.size[::-1]) if self.tracker.uses_frames else image
        scaled = np.asarray(rows, np.float32).reshape(-1, 6).copy()
        scaled[:, :4] *= gain
        tracked, ids = self.tracker.update(scaled, image, timestamp)
        tracked[:, :4] /= gain
        self.frames += 1
        return Tracks(tracked, ids, self.names, self._trails(tracked, ids))

    def _trails(self, rows: np.ndarray, ids: np.ndarray) -> dict[int, np.ndarray]:
        """Each id's recent centres, this frame's added; ids unseen for TRAIL_FRAMES frames are forgotten."""
        centres = (rows[:, :2] + rows[:, 2:4]) / 2
        for track_id, centre in zip(ids.tolist(), centres):
            self.trails.setdefault(track_id, collections.deque(maxlen=TRAIL_FRAMES)).append(centre)
            self.last_seen[track_id] = self.frames
        for track_id in [key for key, seen in self.last_seen.items() if self.frames - seen > TRAIL_FRAMES]:
            del self.trails[track_id], self.last_seen[track_id]
        return {track_id: np.array(self.trails[track_id]) for track_id in ids.tolist()}


class StreamTrackers:
    """A StreamTracker per stream key, made at a stream's first frame with the settings given then."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.streams: dict[Hashable, StreamTracker] = {}

    def get(self, stream: Hashable, settings: TrackerSettings, frame_rate: float = 30.0) -> StreamTracker:
        """The stream's tracker; a stream already tracked with other settings is a UserError (reset it first)."""
        tracker = self.streams.get(stream)
        if tracker is None:
            tracker = self.streams[stream] = StreamTracker(settings, self.names, frame_rate)
        elif tracker.settings != settings:
            raise UserError(f"stream {stream!r} is tracked with {tracker.settings.tracker}'s settings already: "
                            "reset_tracks(stream) before tracking it with others")
        return tracker

    def reset(self, stream: Hashable | None = None) -> None:
        """Forget one stream's tracks, or every stream's (None)."""
        if stream is None:
            self.streams.clear()
        else:
            self.streams.pop(stream, None)
