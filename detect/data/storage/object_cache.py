"""The local disk cache of fetched objects: files under one folder, at most a size limit, the least recently used
evicted first. Safe for every loader worker and rank of a node: each file is written whole under a temporary name
and renamed into place, one object is fetched by one process at a time (file locks), and eviction runs under a lock.
Recent use is each file's access time, set on every read (never left to the mount's atime options)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from detect.atomic_file import TEMPORARY_SUFFIX, make_folder, remove_file, replacing
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)

LIMIT_VARIABLE = "DETECT_REMOTE_CACHE_GB"
DEFAULT_LIMIT_GB = 50.0
# An eviction frees down to this share of the limit, so that it walks the folder once per tenth of the limit fetched
# rather than on every fetch once the cache is full.
LOW_WATER = 0.9
# Fetch locks, by a hash of the object: two processes after one object wait for each other (it is fetched once),
# two after different objects rarely share one.
STRIPES = 64


def limit_bytes() -> int:
    """$DETECT_REMOTE_CACHE_GB (default 50) in bytes; a value that is not a positive number is one line."""
    text = os.environ.get(LIMIT_VARIABLE) or str(DEFAULT_LIMIT_GB)
    try:
        gigabytes = float(text)
    except ValueError:
        gigabytes = -1.0
    if not gigabytes > 0:
        raise UserError(f"{LIMIT_VARIABLE}={text}: give the disk cache's size limit in GB, a positive number")
    return int(gigabytes * 2**30)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (made if missing): between processes, and between threads (each opens its own)."""
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def touch(path: str) -> bool:
    """Mark `path` used now (its access time; the modification time is kept); False if it is not there."""
    try:
        os.utime(path, ns=(time.time_ns(), os.stat(path).st_mtime_ns))
    except FileNotFoundError:
        return False
    return True


class ObjectCache:
    """Files under `folder`/objects (named by the caller), at most `limit` bytes in all."""

    def __init__(self, folder: Path, limit: int) -> None:
        self.folder, self.limit = folder, limit
        self.objects = folder / "objects"
        for made in (self.objects, folder / "locks"):
            make_folder(made, cache=True)

    def path(self, name: str) -> str:
        """Where object `name` (a relative path) is kept."""
        return os.path.join(self.objects, name)

    def fetch(self, name: str, read: Callable[[], bytes]) -> str:
        """The path of `name`, kept here: used from the cache when there, else read (once for the node) and kept."""
        path = self.path(name)
        if touch(path):
            return path
        stripe = int(hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:8], 16) % STRIPES
        with file_lock(self.folder / "locks" / f"{stripe:02d}"):
            if touch(path):  # another worker or rank fetched it while this one waited
                return path
            data = read()
            with replacing(path, cache=True) as temporary:  # the split's images are these copies
                temporary.write_bytes(data)
        self._account(len(data))
        return path

    def _account(self, size: int) -> None:
        """Add `size` to the usage the node's processes share; past the limit, evict."""
        usage_file = self.folder / "usage"
        with file_lock(self.folder / "lock"):
            try:
                usage = int(usage_file.read_text()) + size
            except (OSError, ValueError):  # the first fetch, or a cut-short file: count what is there
                usage = self._files_total()
            if usage > self.limit:
                usage = self._evict()
            with replacing(usage_file) as temporary:
                temporary.write_text(str(usage))

    def _files(self) -> list[tuple[int, int, str]]:
        """(access time ns, size, path) of every kept file (files being written are left alone)."""
        found = []
        for folder, _, names in os.walk(self.objects):
            for name in names:
                path = os.path.join(folder, name)
                with contextlib.suppress(FileNotFoundError):  # evicted by another walk, or renamed
                    info = os.stat(path)
                    if not name.endswith(TEMPORARY_SUFFIX):
                        found.append((info.st_atime_ns, info.st_size, path))
        return found

    def _files_total(self) -> int:
        return sum(size for _, size, _ in self._files())

    def _evict(self) -> int:
        """Remove the least recently used files until LOW_WATER of the limit is used; the bytes left."""
        files = sorted(self._files())
        total, removed = sum(size for _, size, _ in files), 0
        for _, size, path in files:
            if total <= LOW_WATER * self.limit:
                break
            remove_file(path, cache=True)
            removed += 1
            total -= size
        LOGGER.debug("%s: evicted %d files, %.1f MB kept", self.objects, removed, total / 2**20)
        return total
