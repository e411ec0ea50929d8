"""The writes themselves: every file is written into a hidden temporary beside its final place, then renamed over it,
so that a reader (ranks, loader workers, other nodes on shared storage) sees the old file or the new one, never half,
and a link or hard link at the final place is replaced, never written through. The place is settled, and checked
against the command's sources, when the write starts and again at the rename (places.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from detect.atomic_file.places import Refused, absolute_folder, real_folder, refuse_source, said, settle
from detect.errors import UserError

# Every temporary file ends so (unless it keeps its suffix for a library that reads it): a folder's listing can leave
# out files being written (data/storage/object_cache.py).
TEMPORARY_SUFFIX = ".tmp"
MAX_NAME_BYTES = 200  # of a temporary's copy of the final name: file systems allow 255 bytes a name


class Draft:
    """A file being written at `temporary`, until commit() renames it over `path` (and each of `companions`, suffixes
    of files a library writes beside it: OpenVINO's .bin beside its .xml). `keep_suffix`: the temporary ends with
    the file's suffix, for a writer that picks its format by it (OpenCV, matplotlib). `cache`: a cache beside the
    data, which may lie inside a source folder (places.py)."""

    def __init__(self, path: str | os.PathLike, cache: bool = False, keep_suffix: bool = False,
                 companions: Sequence[str] = ()) -> None:
        self.path, self.cache, self.companions = path, cache, tuple(companions)
        name = os.path.basename(os.fspath(path))
        short = os.fsdecode(os.fsencode(name)[:MAX_NAME_BYTES])
        hidden = f".{short}.{uuid.uuid4().hex[:12]}{TEMPORARY_SUFFIX}{os.path.splitext(name)[1] if keep_suffix else ''}"
        self.place = settle(path, cache)
        self.temporary, self.committed = Path(self.place[0], hidden), False

    def commit(self) -> Path:
        """Rename the temporary (and its companions) over their final places, checked again now; returns `path`."""
        place = settle(self.path, self.cache)
        if place != self.place:
            raise Refused(f"cannot write {self.path}: it led to {os.path.join(*self.place)} when the write began and "
                          f"leads to {os.path.join(*place)} now (a link changed meanwhile); nothing was written")
        folder, name = place
        for suffix in self.companions:
            companion = Path(name).with_suffix(suffix).name
            refuse_source(folder, companion, Path(self.path).with_suffix(suffix), self.cache)
            with said(Path(self.path).with_suffix(suffix)):
                os.replace(self.temporary.with_suffix(suffix), os.path.join(folder, companion))
        with said(self.path):
            os.replace(self.temporary, os.path.join(folder, name))
        self.committed = True
        return Path(self.path)

    def discard(self) -> None:
        """Remove what is left of the temporary and its companions (nothing after a commit)."""
        if self.committed:
            return
        for suffix in self.companions:
            self.temporary.with_suffix(suffix).unlink(missing_ok=True)
        self.temporary.unlink(missing_ok=True)


@contextlib.contextmanager
def replacing(path: str | os.PathLike, cache: bool = False, keep_suffix: bool = False,
              companions: Sequence[str] = ()) -> Iterator[Path]:
    """A hidden temporary path beside `path`, unique to this writer, to write; when the block ends normally it
    replaces `path` (os.replace: atomic on one file system), otherwise it is removed and the error goes on (an
    OSError as a WriteError naming `path`). Draft says what the options do."""
    draft = Draft(path, cache, keep_suffix, companions)
    try:
        with said(path):
            yield draft.temporary
        draft.commit()
    finally:
        draft.discard()


def write_bytes(path: str | os.PathLike, data: bytes, cache: bool = False) -> Path:
    """`path` replaced by `data` (its folder made)."""
    with replacing(path, cache) as temporary:
        temporary.write_bytes(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, cache: bool = False) -> Path:
    """`path` replaced by `text` in UTF-8 (its folder made)."""
    return write_bytes(path, text.encode("utf-8"), cache)


def write_image(path: str | os.PathLike, image, params: Sequence[int] = (), cache: bool = False) -> bool:
    """`path` replaced by `image` (BGR, as OpenCV holds it) encoded as its suffix says (cv2.imwrite, whose `params`
    these are); False, with `path` left as it was, where OpenCV cannot encode it (as cv2.imwrite says)."""
    import cv2  # only the writes of images need it

    draft = Draft(path, cache, keep_suffix=True)
    try:
        written = bool(cv2.imwrite(str(draft.temporary), image, list(params)))
        if written:
            draft.commit()
        return written
    finally:
        draft.discard()


class VideoFile:
    """An mp4v video at `path`, written into a draft beside it and named once whole when closed (a run stopped halfway
    leaves no half video). OpenCV writes the frames of `size` (width, height) it is given."""

    def __init__(self, path: str | os.PathLike, fps: float, size: tuple[int, int]) -> None:
        import cv2  # only the writes of videos need it

        self.size = size
        self._draft = Draft(path, keep_suffix=True)
        self._writer = cv2.VideoWriter(str(self._draft.temporary), cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
        if not self._writer.isOpened():
            self._draft.discard()
            raise UserError(f"{path}: OpenCV cannot write an mp4v video here")

    def write(self, image) -> None:
        self._writer.write(image)

    def close(self) -> None:
        self._writer.release()
        try:
            self._draft.commit()
        finally:
            self._draft.discard()


def open_stream(path: str | os.PathLike) -> TextIO:
    """`path` opened to write as a stream (a tracker's MOT rows, one frame at a time): written in place as it goes,
    so a reader, or a run stopped half-way, has every flushed line, where the other writes rename a whole file. What
    was at the place (an earlier run's file, a link, a hard link) is removed first, as itself (the place was
    checked: never a source), and the file made new, never opened through a link."""
    folder, name = settle(path)
    target = os.path.join(folder, name)
    with said(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    return os.fdopen(descriptor, "w", encoding="utf-8")


def append_text(path: str | os.PathLike, text: str) -> Path:
    """`text` added at the end of `path` (made if missing): the file is written anew, whole, as every write here."""
    folder, name = settle(path)
    try:
        with open(os.path.join(folder, name), "rb") as handle:
            before = handle.read()
    except FileNotFoundError:
        before = b""
    return write_bytes(path, before + text.encode("utf-8"))


def copy_file(source: str | os.PathLike, path: str | os.PathLike) -> Path:
    """`path` replaced by a copy of `source`'s bytes (and times)."""
    with replacing(path) as temporary:
        shutil.copy2(source, temporary)
    return Path(path)


def link_file(path: str | os.PathLike, target: str | os.PathLike) -> Path:
    """`path` replaced by a symbolic link to `target`."""
    with replacing(path) as temporary:
        os.symlink(target, temporary)
    return Path(path)


def make_folder(path: str | os.PathLike, cache: bool = False) -> Path:
    """The folder `path`, made where missing (a link inside an output folder replaced), checked against the
    sources; returns `path`."""
    folder, name = absolute_folder(path)
    with said(path):
        real = real_folder(os.path.join(folder, name), cache, given=path)
    if not cache:
        refuse_source(os.path.dirname(real), os.path.basename(real), path)
    return Path(path)


def _existing(path: str | os.PathLike, cache: bool) -> tuple[str, str] | None:
    """(real folder, name) of `path` where its folder is there (a link inside an output folder is not), checked."""
    folder, name = absolute_folder(path)
    real = real_folder(folder, cache, make=False, given=path)
    if real is None:
        return None
    refuse_source(real, name, path, cache)
    return real, name


def remove_file(path: str | os.PathLike, cache: bool = False) -> None:
    """Remove the file (or link: never what it leads to) `path`, unless it is a source; nothing when it is not there."""
    place = _existing(path, cache)
    if place is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(*place))


def remove_folder(path: str | os.PathLike) -> None:
    """Remove the folder `path` if it is empty (OSError if not), unless it is a source; nothing when it is not there."""
    place = _existing(path, cache=False)
    if place is not None:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(os.path.join(*place))


def remove_tree(path: str | os.PathLike, cache: bool = False) -> None:
    """Remove the folder `path` and everything in it (a link in it removed, never followed), unless it is or lies in
    a source folder; nothing when it is not there."""
    place = _existing(path, cache)
    if place is not None:
        shutil.rmtree(os.path.join(*place), ignore_errors=True)


def replace_folder(made: str | os.PathLike, path: str | os.PathLike, cache: bool = False) -> Path:
    """Rename the folder `made` to `path`, which must be missing or an empty folder (os.replace)."""
    folder, name = settle(path, cache)
    with said(path):
        os.replace(made, os.path.join(folder, name))
    return Path(path)


def publish(draft: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Give the finished file `draft` the name `path` unless a file has it already (a hard link: one writer wins
    however many race; where the file system has none, a rename while `path` is missing); whether it did."""
    folder, name = settle(path)
    target = os.path.join(folder, name)
    try:
        os.link(draft, target)
    except FileExistsError:
        return False
    except OSError:
        if os.path.lexists(target):
            return False
        os.replace(draft, target)
    return True
