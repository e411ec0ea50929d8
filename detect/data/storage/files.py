"""Which paths may be opened as image or label files (regular files only: a FIFO named x.jpg blocks its reader for
ever), and a folder walk that follows links but never loops, naming each entry it skips."""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
from collections.abc import Callable

from detect.data.records import IMAGE_SUFFIXES
from detect.errors import UserError

# Entries a walk reads before it stops with one line: a split of 10 million images is 8x COCO's train2017 and
# Objects365's 1.7 M; a walk past it is almost surely a wrong 'path' (/, a home folder, a network root).
WALK_LIMIT = 10_000_000
# Kernel file systems hold no datasets: special files, entries even root cannot read, links to every folder.
KERNEL_FOLDERS = ("/proc", "/sys", "/dev")

# Why a path is not opened (the label check's table, predict's lines and the tests use these strings).
MISSING = "no such file"
BROKEN_LINK = "broken link"
LINK_LOOP = "link loop"
NOT_REGULAR = "not a regular file"
NO_ACCESS = "permission denied"
UNREADABLE_FOLDER = "unreadable folder"
SEEN_FOLDER = "link to a folder listed before"
KERNEL_FOLDER = "kernel file system, not walked"


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "unknown type"


def _stat_failure(path: str, error: OSError) -> str:
    """Why stat(path) failed, in the words above."""
    if error.errno == errno.ELOOP:
        return LINK_LOOP
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return BROKEN_LINK if os.path.islink(path) else MISSING
    if error.errno in (errno.EACCES, errno.EPERM):
        return NO_ACCESS
    return f"cannot be read ({error.strerror or error})"


def file_problem(path: str | os.PathLike) -> str | None:
    """None for a regular file we may read; else why not: no such file, a broken link, a link loop, not a regular
    file (a FIFO, socket, device or folder), permission denied. One stat: no open, so nothing can block."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        return _stat_failure(os.fspath(path), error)
    if not stat.S_ISREG(mode):
        return f"{NOT_REGULAR} ({_kind(mode)})"
    if not os.access(path, os.R_OK):
        return NO_ACCESS
    return None


SUFFIXES = frozenset(suffix.removeprefix(".") for suffix in IMAGE_SUFFIXES)


def is_image(name: str) -> bool:
    """Whether a file name has an image suffix."""
    return name.rpartition(".")[2].lower() in SUFFIXES


def require_file(path: str | os.PathLike) -> None:
    """stat's own OSError for a path that is not there (as the reader would raise it), or an OSError naming what the
    path is when it is not a regular file (a FIFO, socket, device or folder)."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise OSError(f"{NOT_REGULAR} ({_kind(mode)})")


@dataclasses.dataclass
class Listing:
    """What a walk found: the wanted regular files in Path order, and each entry it skipped as (path, why)."""

    files: list[str] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def _folder_key(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _kernel_devices() -> set[int]:
    """st_dev of the kernel file systems mounted here (a plain folder /dev on the root file system is not one)."""
    devices = set()
    for folder in KERNEL_FOLDERS:
        try:
            devices.add(os.stat(folder).st_dev)
        except OSError:
            continue
    return devices - {os.stat("/").st_dev}


def _ancestors(folder: str) -> list[tuple[int, int]]:
    """Keys of `folder`'s real parents, from /: a link inside it to any of them is a loop."""
    keys, path = [], os.path.realpath(folder)
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return keys[::-1]
        path = parent
        try:
            keys.append(_folder_key(os.stat(path)))
        except OSError:
            continue


class _Walk:
    """One walk's state: the folders on the current path and those entered, the entries read so far."""

    def __init__(self, root: str, wanted: Callable[[str], bool], recursive: bool, limit: int) -> None:
        self.root, self.wanted, self.recursive, self.limit = root, wanted, recursive, limit
        self.listing, self.entered, self.read = Listing(), set(), 0
        self.kernel = _kernel_devices()
        self.path = _ancestors(root)

    def enter(self, folder: str, info: os.stat_result, linked: bool) -> list[os.DirEntry] | None:
        """The folder's entries sorted by name, or None with the reason named (a loop, unreadable, ...)."""
        key = _folder_key(info)
        reason = (LINK_LOOP if key in self.path else KERNEL_FOLDER if info.st_dev in self.kernel
                  else SEEN_FOLDER if linked and key in self.entered else None)
        if reason is None:
            try:
                entries = sorted(self.scan(folder), key=lambda entry: entry.name)
            except OSError as error:
                reason = f"{UNREADABLE_FOLDER} ({error.strerror or error})"
        if reason is not None:
            self.listing.skipped.append((folder, reason))
            return None
        self.entered.add(key)
        self.path.append(key)
        return entries

    def scan(self, folder: str) -> list[os.DirEntry]:
        """The folder's entries, counted as they are read: past the limit, one line (not a list of them all)."""
        entries = []
        with os.scandir(folder) as found:
            for entry in found:
                entries.append(entry)
                self.read += 1
                if self.read > self.limit:
                    raise UserError(f"{self.root}: more than {self.limit:,} entries under it, the walk stopped (is "
                                    "it the dataset's folder?)")
        return entries

    def entry(self, entry: os.DirEntry) -> os.stat_result | None:
        """A folder entry: a folder to enter comes back; a file is listed, or named when it cannot be. Only links,
        folders and special files cost a stat (the entry's type comes with its name), so a split on a network disk
        is listed at the speed of its folders, not of its images."""
        try:
            if entry.is_file(follow_symlinks=False):
                if self.wanted(entry.name):
                    self.listing.files.append(entry.path)
                return None
            if entry.is_dir(follow_symlinks=False):
                return entry.stat(follow_symlinks=False) if self.recursive else None
            info = entry.stat()  # a link, followed, or a special file
        except OSError as error:
            self.listing.skipped.append((entry.path, _stat_failure(entry.path, error)))
            return None
        if stat.S_ISDIR(info.st_mode):
            return info if self.recursive else None
        if self.wanted(entry.name):
            if stat.S_ISREG(info.st_mode):
                self.listing.files.append(entry.path)
            else:
                self.listing.skipped.append((entry.path, f"{NOT_REGULAR} ({_kind(info.st_mode)})"))
        return None


def walk(root: str, wanted: Callable[[str], bool], recursive: bool = True, limit: int = WALK_LIMIT) -> Listing:
    """The files under folder `root` whose names `wanted` takes, in Path order (a folder's entries sorted by name,
    each subfolder's files in its place). Links to files and folders are followed, but never into a folder on the
    current path (a link loop) nor into one entered before (so each folder is listed at most twice: once through
    links, once where it is); kernel folders (/proc, /sys, /dev) are not walked. Broken and looping links, unreadable
    folders and special files are named in `skipped`. A UserError after `limit` entries."""
    state = _Walk(root, wanted, recursive, limit)
    try:
        info = os.stat(root)
    except OSError as error:
        state.listing.skipped.append((root, _stat_failure(root, error)))
        return state.listing
    entries = state.enter(root, info, linked=False)
    stack = [iter(entries)] if entries is not None else []
    while stack:  # a stack, not recursion: a tree deeper than Python's recursion limit is walked too
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            state.path.pop()
            continue
        folder = state.entry(entry)
        if folder is not None:
            inner = state.enter(entry.path, folder, linked=entry.is_symlink())
            if inner is not None:
                stack.append(iter(inner))
    return state.listing
