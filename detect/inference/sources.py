"""What a --source string names, read as yolov5's detect.py reads it: a webcam index ('0'), a .streams list, an
rtsp/rtmp/http(s) stream, an http(s) URL of an image or video file (downloaded), the screen ('screen', grabbed with
mss), or files (media.list_sources).

Network use here is only ever the user's own URL, which they asked us to read."""

from __future__ import annotations

import importlib
import itertools
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from detect.atomic_file import protect, replacing
from detect.data.images.pixels import DEFAULT_MAX_PIXELS
from detect.data.records import IMAGE_SUFFIXES
from detect.data.storage.files import require_file
from detect.errors import UserError
from detect.inference.media import VIDEO_SUFFIXES, Frame, file_frames, list_sources
from detect.inference.streams import LiveStream, stream_frames

URL_SCHEMES = ("rtsp://", "rtmp://", "http://", "https://")
DOWNLOAD_TIMEOUT_S = 30  # per network read of a downloaded image or video


class Source:
    """The frames of a --source; close() stops its streams and removes downloads (`with contextlib.closing(...)`)."""

    def __init__(self, frames: Iterator[Frame], live: bool = False, cleanup: Callable[[], None] = lambda: None):
        self.frames, self.live, self._cleanup = frames, live, cleanup

    def __iter__(self) -> Iterator[Frame]:
        return self.frames

    def close(self) -> None:
        self._cleanup()


def is_url(source: str) -> bool:
    return source.lower().startswith(URL_SCHEMES)


def url_file_name(url: str) -> str:
    """The file name at the end of a URL's path ('' when it ends in '/')."""
    return urllib.parse.unquote(urllib.parse.urlparse(url).path).rsplit("/", 1)[-1]


def open_source(source: str, vid_stride: int = 1, max_pixels: int = DEFAULT_MAX_PIXELS) -> Source:
    """The frames `source` names, every vid_stride-th of videos and streams; a source that cannot be read at all
    (no such file, no camera, a stream that does not open, a failed download) is a UserError, before any frame. An
    image file over `max_pixels` is a frame with its problem, never decoded."""
    if source.isnumeric():
        return _live([int(source)], vid_stride)
    if source.lower().startswith("screen"):
        return _screen(source)
    if source.endswith(".streams"):
        return _live(_stream_list(source), vid_stride)
    if is_url(source):
        if Path(url_file_name(source)).suffix.lower() in IMAGE_SUFFIXES + VIDEO_SUFFIXES:
            return _download(source, vid_stride, max_pixels)
        return _live([source], vid_stride)
    files = list_sources(source)
    protect([source], "the --source")
    protect(files, "a file --source reads")
    return Source(file_frames(files, vid_stride, max_pixels=max_pixels))


def _stream_list(path: str) -> list[str | int]:
    """A .streams file's lines: URLs and webcam indices, one a line."""
    try:
        require_file(path)  # a FIFO would block the read for ever
        lines = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    except OSError as error:
        raise UserError(f"--source {path}: cannot read it ({error.strerror or error})") from None
    if not lines:
        raise UserError(f"--source {path}: no streams in it (one URL or webcam index a line)")
    return [int(line) if line.isnumeric() else line for line in lines]


def _live(targets: list[str | int], vid_stride: int) -> Source:
    streams: list[LiveStream] = []
    try:
        for target in targets:
            streams.append(LiveStream(target, vid_stride))
    except BaseException:
        for stream in streams:
            stream.close()
        raise

    def close() -> None:
        for stream in streams:
            stream.close()

    return Source(stream_frames(streams), live=True, cleanup=close)


def _screen(source: str) -> Source:
    """yolov5's `screen [number] [left top width height]` (pixels, from the screen's corner; screen 0 is all of them
    in mss's numbering): that region grabbed with mss, frame after frame, as a live source. What is missing for it
    here (the mss package, a display) is a UserError."""
    words = source.split()
    if words[0].lower() != "screen" or len(words) - 1 not in (0, 1, 4, 5) or not all(w.isdigit() for w in words[1:]):
        raise UserError(f"--source {source}: a screen is 'screen', 'screen N', 'screen left top width height' or "
                        "'screen N left top width height' (pixels)")
    numbers = [int(word) for word in words[1:]]
    screen = numbers.pop(0) if len(numbers) in (1, 5) else 0
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise UserError(f"--source {source}: grabbing the screen needs a display, and this session has none "
                        "($DISPLAY is not set)")
    try:
        grabber = importlib.import_module("mss").mss()
    except ImportError:
        raise UserError(f"--source {source}: the screen is grabbed with the mss package: pip install mss") from None
    monitors = grabber.monitors
    if screen >= len(monitors):
        raise UserError(f"--source {source}: no screen {screen} (this display has screens 0-{len(monitors) - 1})")
    monitor = monitors[screen]
    region = {"left": monitor["left"] + (numbers[0] if numbers else 0),
              "top": monitor["top"] + (numbers[1] if numbers else 0),
              "width": numbers[2] if numbers else monitor["width"], "height": numbers[3] if numbers else monitor["height"]}

    def frames() -> Iterator[Frame]:
        for index in itertools.count():
            image = np.ascontiguousarray(np.asarray(grabber.grab(region))[:, :, :3])  # BGRA -> BGR
            yield Frame(Path(f"screen{screen}"), image, index, count=0, stream=True, origin=source)

    return Source(frames(), live=True, cleanup=grabber.close)


def _download(url: str, vid_stride: int, max_pixels: int) -> Source:
    """The image or video at `url`, downloaded into a temporary folder that close() removes."""
    folder = tempfile.TemporaryDirectory(prefix="detect-source-")
    path = Path(folder.name) / url_file_name(url)
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, replacing(path) as temporary, \
                open(temporary, "wb") as file:
            shutil.copyfileobj(response, file)
    except (OSError, ValueError) as error:  # URLError and HTTPError are OSErrors; ValueError: a malformed URL
        folder.cleanup()
        if isinstance(error, urllib.error.HTTPError):
            error.close()  # it holds the response's connection
        raise UserError(f"--source {url}: cannot download it ({_why(error)})") from None
    return Source(file_frames([path], vid_stride, {path: url}, max_pixels), cleanup=folder.cleanup)


def _why(error: Exception) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return str(error.reason)
    return str(error)
