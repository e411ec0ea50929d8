"""Live sources (an rtsp/rtmp/http stream, a webcam index): each read on a background thread that keeps only its
latest frame, so a slow model skips frames instead of falling behind; a lost stream is reopened once."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

from detect.errors import UserError
from detect.inference.media import Frame

LOGGER = logging.getLogger(__name__)
# How long FFmpeg may wait to connect and for each frame before it gives up (a stalled camera then counts as lost).
OPEN_TIMEOUT_MS = 10_000
READ_TIMEOUT_MS = 10_000
FALLBACK_FPS = 30.0  # when a stream does not say (yolov5's fallback too)
_LOG_LEVEL_LOCK = threading.Lock()


def stream_name(target: str | int) -> str:
    """A file stem for a stream's outputs: every character but letters, digits, '-' and '_' becomes '_'."""
    return re.sub(r"[^\w-]", "_", str(target))


def open_capture(target: str | int) -> cv2.VideoCapture:
    """A capture of a URL (through FFmpeg, with timeouts) or of the camera at an index; it may not be open."""
    with _quiet_opencv():
        if isinstance(target, int):
            return cv2.VideoCapture(target)
        timeouts = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, OPEN_TIMEOUT_MS, cv2.CAP_PROP_READ_TIMEOUT_MSEC, READ_TIMEOUT_MS]
        return cv2.VideoCapture(target, cv2.CAP_FFMPEG, timeouts)


@contextlib.contextmanager
def _quiet_opencv() -> Iterator[None]:
    """OpenCV's warnings off: it warns for each backend that fails to open a source, and our one line says what
    failed. Its log level is global: the lock keeps two threads from restoring each other's level."""
    with _LOG_LEVEL_LOCK:
        level = cv2.utils.logging.getLogLevel()
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
        try:
            yield
        finally:
            cv2.utils.logging.setLogLevel(level)


class LiveStream:
    """One stream read on its own thread from construction (a UserError when it cannot be opened); `latest()` waits
    for a frame newer than the last one it returned, None once the stream has ended."""

    def __init__(self, target: str | int, vid_stride: int = 1) -> None:
        self.target, self.vid_stride = target, vid_stride
        self.name = stream_name(target)
        capture = open_capture(target)
        if not capture.isOpened():
            capture.release()
            what = f"no camera at index {target}" if isinstance(target, int) else "cannot open the stream"
            raise UserError(f"--source {target}: {what}")
        fps = capture.get(cv2.CAP_PROP_FPS)
        self.fps = (fps if 0 < fps < 1000 else FALLBACK_FPS) / vid_stride  # some report 0, nan or 90000
        count = capture.get(cv2.CAP_PROP_FRAME_COUNT)
        self.length = int(count) if 0 < count < 2**31 else 0  # a video served over http has one: read it once
        self.read_count = 0  # frames read from the stream, kept or not
        self._image: np.ndarray | None = None
        self._index, self._returned = -1, -1  # index of the latest frame, and of the last one latest() returned
        self._ended, self._stop = False, threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(capture,), name=f"stream {self.name}", daemon=True)
        self._thread.start()

    def _read(self, capture: cv2.VideoCapture) -> None:
        lost_at = None  # read_count when the stream was lost and reopened, until a frame comes again
        try:
            while not self._stop.is_set() and not (self.length and self.read_count >= self.length):
                if not capture.grab():
                    if lost_at is not None or self.length:
                        break
                    capture.release()
                    capture, lost_at = open_capture(self.target), self.read_count
                    continue
                if lost_at is not None:
                    LOGGER.warning("stream %s was lost after %d frames and reconnected", self.target, lost_at)
                self.read_count, lost_at = self.read_count + 1, None
                if self.read_count % self.vid_stride == 0:
                    self._keep(capture.retrieve())
        finally:
            capture.release()
            if not self._stop.is_set():  # logged before the end is seen, so it comes before the run's last lines
                LOGGER.warning("stream %s ended after %d frames%s", self.target, self.read_count,
                               "" if self.length else " (it could not be reopened)")
            with self._changed:
                self._ended = True
                self._changed.notify_all()

    def _keep(self, retrieved: tuple[bool, np.ndarray]) -> None:
        ok, image = retrieved
        if ok:
            with self._changed:
                self._image, self._index = image, self.read_count - 1
                self._changed.notify_all()

    def latest(self) -> tuple[int, np.ndarray] | None:
        """(frame index, (h, w, 3) uint8 BGR) of the newest frame not yet returned; None when the stream has ended."""
        with self._changed:
            self._changed.wait_for(lambda: self._index > self._returned or self._ended)
            if self._index <= self._returned:
                return None
            self._returned = self._index
            return self._index, self._image

    def close(self) -> None:
        """Stop reading (the thread ends after its current read, at most READ_TIMEOUT_MS)."""
        self._stop.set()
        self._thread.join(timeout=READ_TIMEOUT_MS / 1000)


def stream_frames(streams: list[LiveStream]) -> Iterator[Frame]:
    """The latest frame of each stream in turn, until every stream has ended."""
    live = list(enumerate(streams, 1))
    while live:
        for entry in list(live):
            position, stream = entry
            newest = stream.latest()
            if newest is None:
                live.remove(entry)
                continue
            yield Frame(Path(stream.name), newest[1], newest[0], count=0, fps=stream.fps, position=position,
                        total=len(streams), stream=True, origin=str(stream.target))
