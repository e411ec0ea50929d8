"""What a --source string names, read as yolov5's detect.py reads it: a webcam index ('0'), a .streams list, an
rtsp/rtmp/http(s) stream, an http(s) URL of an image or video file (downloaded), or files (media.list_sources).

Network use here is only ever the user's own URL, which they asked us to read."""

from __future__ import annotations

import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from detect.data.images.files import require_file
from detect.data.images.pixels import DEFAULT_MAX_PIXELS
from detect.data.records import IMAGE_SUFFIXES
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
    if source.endswith(".streams"):
        return _live(_stream_list(source), vid_stride)
    if is_url(source):
        if Path(url_file_name(source)).suffix.lower() in IMAGE_SUFFIXES + VIDEO_SUFFIXES:
            return _download(source, vid_stride, max_pixels)
        return _live([source], vid_stride)
    return Source(file_frames(list_sources(source), vid_stride, max_pixels=max_pixels))


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


def _download(url: str, vid_stride: int, max_pixels: int) -> Source:
    """The image or video at `url`, downloaded into a temporary folder that close() removes."""
    folder = tempfile.TemporaryDirectory(prefix="detect-source-")
    path = Path(folder.name) / url_file_name(url)
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, path.open("wb") as file:
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
