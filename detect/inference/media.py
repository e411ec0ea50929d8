"""Files to predict on (an image, a video, a folder, a glob, a .txt list) as frames; sources.py picks the kind."""

from __future__ import annotations

import dataclasses
import glob
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

from detect.data.images.load import read_failure
from detect.data.images.pixels import DEFAULT_MAX_PIXELS, check_pixels
from detect.data.labels.check import decode_truncated_jpeg
from detect.data.records import IMAGE_SUFFIXES
from detect.errors import UserError

VIDEO_SUFFIXES = (".asf", ".avi", ".gif", ".m4v", ".mkv", ".mov", ".mp4", ".mpeg", ".mpg", ".ts", ".webm", ".wmv")


def is_video(path: Path) -> bool:
    return path.suffix.lower() in VIDEO_SUFFIXES


@dataclasses.dataclass(frozen=True)
class Frame:
    """One image, or one frame of a video or live stream; image is None when the file cannot be read."""

    path: Path  # the file, or a live stream's name as a file name (streams.py)
    image: np.ndarray | None  # (h, w, 3) uint8 BGR
    index: int = 0  # of the frame in its video or stream
    count: int = 1  # frames in the video; 0 for a live stream, whose end is unknown
    fps: float = 0.0  # of the frames yielded (a video's rate divided by --vid-stride)
    problem: str = ""  # "<path>: <reason>" when image is None
    position: int = 1  # which of the source's `total` files or streams this frame is from
    total: int = 1
    stream: bool = False
    origin: str = ""  # what the user named, when not `path` (a URL downloaded to path)

    @property
    def video(self) -> bool:
        return self.stream or is_video(self.path)

    @property
    def name(self) -> str:
        """The frame's source as the user named it."""
        return self.origin or str(self.path)


def _media(paths: list[Path]) -> list[Path]:
    return sorted(path for path in paths if path.suffix.lower() in IMAGE_SUFFIXES + VIDEO_SUFFIXES)


def list_sources(source: str) -> list[Path]:
    """The files `source` names: a file; a folder's images and videos (not recursive); a glob's matches; or each
    line of a .txt list, itself a file, folder or glob (relative to the list's folder). Files named one by one are
    kept whatever their suffix; a listed file that is missing is reported when it is read."""
    path = Path(source)
    if path.suffix == ".txt" and path.is_file():
        lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
        files = [file for line in lines for file in _expand(line, path.parent)]
    else:
        files = _expand(source, None)
    if not files:
        raise UserError(f"--source {source}: no images or videos in it ({', '.join(IMAGE_SUFFIXES + VIDEO_SUFFIXES)})")
    return files


def _expand(entry: str, folder: Path | None) -> list[Path]:
    """A file, a folder's media or a glob's media; `folder` is the .txt list's folder, None for --source itself."""
    path = folder / entry if folder is not None and not Path(entry).is_absolute() else Path(entry)
    if path.is_dir():
        return _media([item for item in path.iterdir() if item.is_file()])
    if glob.has_magic(entry) and not path.exists():
        return _media([Path(match) for match in glob.glob(str(path), recursive=True) if Path(match).is_file()])
    if path.exists() or folder is not None:
        return [path]
    raise UserError(f"--source {entry}: no such file or folder, and no glob pattern")


def _video_frames(path: Path, vid_stride: int) -> Iterator[Frame]:
    """Every vid_stride-th frame (the vid_stride-th, the 2 vid_stride-th, ... as yolov5's LoadImages); the frames
    skipped are grabbed, not decoded."""
    capture = cv2.VideoCapture(str(path))
    try:
        if not capture.isOpened():
            yield Frame(path, None, count=0, problem=f"{path}: cannot open the video")
            return
        count, fps = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)), float(capture.get(cv2.CAP_PROP_FPS))
        index = -1
        while capture.grab():
            index += 1
            if (index + 1) % vid_stride:
                continue
            ok, image = capture.retrieve()
            if not ok:
                return
            yield Frame(path, image, index, max(count, index + 1), fps / vid_stride)
    finally:
        capture.release()


def frames(path: Path, vid_stride: int = 1, max_pixels: int = DEFAULT_MAX_PIXELS) -> Iterator[Frame]:
    """The image at `path`, or every vid_stride-th frame of the video; an unreadable file, or an image over
    `max_pixels`, is one Frame with its problem."""
    if is_video(path):
        yield from _video_frames(path, vid_stride)
        return
    try:
        yield Frame(path, load_image(path, max_pixels))
    except Exception as error:  # noqa: BLE001 (a decoder may raise anything; one file must not end a run)
        yield Frame(path, None, problem=read_failure(path, error))


def file_frames(files: list[Path], vid_stride: int = 1, origins: dict[Path, str] | None = None,
                max_pixels: int = DEFAULT_MAX_PIXELS) -> Iterator[Frame]:
    """The frames of each file in turn, numbered by file; `origins` names a downloaded file as the user did."""
    for position, path in enumerate(files, 1):
        origin = (origins or {}).get(path, "")
        for frame in frames(path, vid_stride, max_pixels):
            yield dataclasses.replace(frame, position=position, total=len(files), origin=origin)


def load_image(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """(h, w, 3) uint8 BGR, EXIF rotation applied; a JPEG cut short is decoded as far as it goes, as in training.
    ImageTooLarge, before decoding, when the header claims more than `max_pixels`."""
    check_pixels(path, max_pixels)
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        image = decode_truncated_jpeg(path.read_bytes())
    if image is None:
        raise OSError("cannot decode the image")
    return image
