"""Files to predict on (an image, a video, a folder, a glob, a .txt list) as frames; sources.py picks the kind."""

from __future__ import annotations

import collections
import dataclasses
import fnmatch
import glob
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

from detect.data.images.load import decode_truncated_jpeg, read_failure
from detect.data.images.pixels import DEFAULT_MAX_PIXELS, check_pixels
from detect.data.records import IMAGE_SUFFIXES
from detect.data.storage.files import UNREADABLE_FOLDER, Listing, file_problem, require_file, walk
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)
NAMED = 3  # paths the line of skipped files names before "and N more"
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


def _is_media(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES + VIDEO_SUFFIXES


def list_sources(source: str) -> list[Path]:
    """The files `source` names: a file; a folder's images and videos (not recursive); a glob's matches; or each
    line of a .txt list, itself a file, folder or glob (relative to the list's folder). Files named one by one are
    kept whatever their suffix. What cannot be read (missing, a broken or looping link, a FIFO, socket or device:
    files.file_problem; an unreadable folder) is left out in one line naming the first few; none left is a
    UserError with the count and the first."""
    path = Path(source)
    if path.suffix == ".txt" and path.is_file():
        try:
            text = path.read_text(errors="replace")
        except OSError as error:
            raise UserError(f"--source {source}: cannot read the list ({error.strerror or error})") from None
        listings = [_expand(line.strip(), path.parent) for line in text.splitlines() if line.strip()]
    else:
        listings = [_expand(source, None)]
    readable, unreadable = [], []
    for listing in listings:
        unreadable += listing.skipped
        for file in listing.files:
            problem = file_problem(file)
            if problem is None:
                readable.append(Path(file))
            else:
                unreadable.append((file, problem))
    if not readable:
        raise UserError(_nothing_readable(source, unreadable))
    if unreadable:
        named = ", ".join(f"{file}: {why}" for file, why in unreadable[:NAMED])
        more = f" and {len(unreadable) - NAMED} more" if len(unreadable) > NAMED else ""
        LOGGER.warning("--source %s: %d of %d skipped (%s): %s%s", source, len(unreadable),
                       len(unreadable) + len(readable), _reasons(unreadable), named, more)
    return readable


def _reasons(unreadable: list[tuple[str, str]]) -> str:
    """'9998 no such file, 2 broken link': how many of each reason."""
    return ", ".join(f"{count} {why}" for why, count in collections.Counter(why for _, why in unreadable).items())


def _nothing_readable(source: str, unreadable: list[tuple[str, str]]) -> str:
    """The one line for a source with no file that can be read."""
    if not unreadable:
        return f"--source {source}: no images or videos in it ({', '.join(IMAGE_SUFFIXES + VIDEO_SUFFIXES)})"
    (first, why), count = unreadable[0], len(unreadable)
    if count == 1:
        return f"--source {source}: {why}" if first == source else f"--source {source}: {first}: {why}"
    reasons = collections.Counter(why for _, why in unreadable)
    first = first if len(reasons) == 1 else f"{first}: {why}"
    return f"--source {source}: none of its {count} files can be read ({_reasons(unreadable)}; the first: {first})"


def _expand(entry: str, folder: Path | None) -> Listing:
    """A file, a folder's media or a glob's media; `folder` is the .txt list's folder, None for --source itself."""
    path = folder / entry if folder is not None and not Path(entry).is_absolute() else Path(entry)
    if os.path.isdir(path):
        return walk(str(path), _is_media, recursive=False)
    if glob.has_magic(entry) and not os.path.lexists(path):
        return _glob(str(path))
    if os.path.lexists(path) or folder is not None:
        return Listing([str(path)])
    raise UserError(f"--source {entry}: no such file or folder, and no glob pattern")


def _glob(pattern: str) -> Listing:
    """A glob's images and videos, sorted. Python's glob follows a link loop under '**' until the path is too long (40
    levels; 2^40 paths for two such links): '**' goes through files.walk, which never loops."""
    parts = Path(pattern).parts
    if "**" not in parts:
        matches = (match for match in glob.glob(pattern) if _is_media(match) and not os.path.isdir(match))
        return Listing(sorted(matches, key=Path))
    literal = next(index for index, part in enumerate(parts) if glob.has_magic(part))
    base, rest = Path(*parts[:literal]) if literal else Path("."), parts[literal:]
    found = walk(str(base), _is_media)

    def matches(file: str) -> bool:
        return _glob_match(Path(file).relative_to(base).parts, rest)

    return Listing(list(filter(matches, found.files)),  # in Path order, as the walk lists them
                   [(file, why) for file, why in found.skipped if why.startswith(UNREADABLE_FOLDER) or matches(file)])


def _glob_match(parts: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    """Whether path parts match glob parts as glob does: '**' any number of folders, '*' never a leading '.'."""
    pattern = tuple(part for index, part in enumerate(pattern) if part != "**" or pattern[index - 1:index] != ("**",))

    def closed(states: set[int]) -> set[int]:  # '**' may match no folder at all
        return states | {index + 1 for index in states if pattern[index:index + 1] == ("**",)}

    states = closed({0})
    for part in parts:
        following = set()
        for index in states - {len(pattern)}:
            wanted = pattern[index]
            if part.startswith(".") and not wanted.startswith("."):
                continue
            if wanted == "**":
                following.add(index)
            elif fnmatch.fnmatchcase(part, wanted):
                following.add(index + 1)
        states = closed(following)
    return len(pattern) in states


def _video_frames(path: Path, vid_stride: int) -> Iterator[Frame]:
    """Every vid_stride-th frame (the vid_stride-th, the 2 vid_stride-th, ... as yolov5's LoadImages); the frames
    skipped are grabbed, not decoded."""
    problem = file_problem(path)  # FFmpeg would block for ever on a FIFO
    if problem is not None:
        yield Frame(path, None, count=0, problem=f"{path}: {problem}")
        return
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
    """(h, w, 3) uint8 BGR, EXIF rotation applied; a JPEG cut short is decoded as far as it goes, as in training. An
    OSError for a path that is not a regular file (a FIFO would block the decoder for ever); ImageTooLarge, before
    decoding, when the header claims more than `max_pixels`."""
    require_file(path)
    check_pixels(path, max_pixels)
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        image = decode_truncated_jpeg(path.read_bytes())
    if image is None:
        raise OSError("cannot decode the image")
    return image
