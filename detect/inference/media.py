"""What `--source` names (an image, a video, a folder, a glob, a .txt list) as a stream of frames to predict on."""

from __future__ import annotations

import dataclasses
import glob
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

from detect.data.images.load import read_failure
from detect.data.labels.check import decode_truncated_jpeg
from detect.data.records import IMAGE_SUFFIXES
from detect.errors import UserError

VIDEO_SUFFIXES = (".asf", ".avi", ".gif", ".m4v", ".mkv", ".mov", ".mp4", ".mpeg", ".mpg", ".ts", ".webm", ".wmv")


def is_video(path: Path) -> bool:
    return path.suffix.lower() in VIDEO_SUFFIXES


@dataclasses.dataclass(frozen=True)
class Frame:
    """One image, or one frame of a video (index of count, at fps); image is None when the file cannot be read."""

    path: Path
    image: np.ndarray | None  # (h, w, 3) uint8 BGR
    index: int = 0
    count: int = 1
    fps: float = 0.0
    problem: str = ""  # "<path>: <reason>" when image is None

    @property
    def video(self) -> bool:
        return is_video(self.path)


def _media(paths: list[Path]) -> list[Path]:
    return sorted(path for path in paths if path.suffix.lower() in IMAGE_SUFFIXES + VIDEO_SUFFIXES)


def list_sources(source: str) -> list[Path]:
    """The files `source` names: a file; a folder's images and videos (not recursive); a glob's matches; or the lines
    of a .txt list (relative paths from the list's folder). Files named one by one are kept whatever their suffix."""
    path = Path(source)
    if path.is_dir():
        files = _media([entry for entry in path.iterdir() if entry.is_file()])
    elif path.suffix == ".txt" and path.is_file():
        lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
        files = [entry if entry.is_absolute() else path.parent / entry for entry in map(Path, lines)]
    elif path.exists():
        files = [path]
    elif glob.has_magic(source):
        files = _media([Path(match) for match in glob.glob(source, recursive=True) if Path(match).is_file()])
    else:
        raise UserError(f"--source {source}: no such file or folder, and no glob pattern")
    if not files:
        raise UserError(f"--source {source}: no images or videos in it ({', '.join(IMAGE_SUFFIXES + VIDEO_SUFFIXES)})")
    return files


def _video_frames(path: Path) -> Iterator[Frame]:
    capture = cv2.VideoCapture(str(path))
    try:
        if not capture.isOpened():
            yield Frame(path, None, count=0, problem=f"{path}: cannot open the video")
            return
        count, fps = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)), float(capture.get(cv2.CAP_PROP_FPS))
        index = 0
        while True:
            ok, image = capture.read()
            if not ok:
                return
            yield Frame(path, image, index, max(count, index + 1), fps)
            index += 1
    finally:
        capture.release()


def frames(path: Path) -> Iterator[Frame]:
    """The image at `path`, or every frame of the video; an unreadable file is one Frame with its problem."""
    if is_video(path):
        yield from _video_frames(path)
        return
    try:
        yield Frame(path, load_image(path))
    except Exception as error:  # noqa: BLE001 (a decoder may raise anything; one file must not end a run)
        yield Frame(path, None, problem=read_failure(path, error))


def load_image(path: Path) -> np.ndarray:
    """(h, w, 3) uint8 BGR, EXIF rotation applied; a JPEG cut short is decoded as far as it goes, as in training."""
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        image = decode_truncated_jpeg(path.read_bytes())
    if image is None:
        raise OSError("cannot decode the image")
    return image
