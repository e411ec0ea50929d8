"""The label-check cache: flat numpy arrays in one .npz, keyed by a hash of the split's file list, every file's size
and mtime, the class count and CACHE_VERSION; never trusted stale."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import zipfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from detect.data.labels.checked import CheckedImages

LOGGER = logging.getLogger(__name__)

# Bump when check.py changes what it accepts or stores, or the file layout changes: every old cache is then rebuilt.
CACHE_VERSION = "detect-labels-3"  # 3: flat arrays in an .npz (was json); 2: a non-finite value skips the image
# stat() is a round trip on a network filesystem (about 1 ms on NFS): this many in flight at once keep 236k stats
# (118k images and their labels) to seconds there; on a local disk they cost the same as a plain loop.
STAT_THREADS = 32
STAT_CHUNK = 4096
ARRAYS = ("widths", "heights", "offsets", "rows", "crowd", "background")


def _stat_chunk(files: Sequence[str]) -> np.ndarray:
    """(n, 2) int64 [size, mtime_ns] per file; [-1, -1] for a missing one."""
    found = []
    for path in files:
        try:
            info = os.stat(path)
            found.append((info.st_size, info.st_mtime_ns))
        except OSError:
            found.append((-1, -1))
    return np.array(found, np.int64).reshape(-1, 2)


def fingerprint(files: Sequence[str], num_classes: int) -> str:
    """sha256 of the version, the class count, the paths in order and each file's (size, mtime_ns) (or missing)."""
    chunks = [files[start:start + STAT_CHUNK] for start in range(0, len(files), STAT_CHUNK)]
    with ThreadPoolExecutor(min(STAT_THREADS, max(1, len(chunks)))) as pool:
        stats = list(pool.map(_stat_chunk, chunks))
    digest = hashlib.sha256(f"{CACHE_VERSION}|{num_classes}|{len(files)}\n".encode())
    digest.update("\n".join(files).encode("utf-8", "surrogateescape"))
    for found in stats:
        digest.update(found.tobytes())
    return digest.hexdigest()


def folder_writable(folder: Path) -> bool:
    """True if we may write in `folder`; a folder without write bits counts as read-only even for root."""
    try:
        mode = os.stat(folder).st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IWUSR) and os.access(folder, os.W_OK)


def read_cache(path: Path, expected: str) -> CheckedImages | None:
    """The cached check if the cache exists, parses and matches `expected`; else None (rebuild)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            if str(data["version"]) != CACHE_VERSION or str(data["key"]) != expected:
                LOGGER.info("%s: stale label cache, rebuilding", path)
                return None
            return CheckedImages(**{name: data[name] for name in ARRAYS}, problems=json.loads(str(data["problems"])))
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as error:
        LOGGER.warning("%s: unreadable label cache (%s), rebuilding", path, error)
        return None


def write_cache(path: Path, key: str, checked: CheckedImages) -> bool:
    """Write atomically (temp + rename); a read-only folder gives a warning and no cache."""
    if not folder_writable(path.parent):
        LOGGER.warning("%s: folder is not writable, running without a label cache", path.parent)
        return False
    temporary = path.with_name(path.name + f".{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as handle:
            np.savez(handle, version=np.array(CACHE_VERSION), key=np.array(key),
                     problems=np.array(json.dumps(checked.problems)), **{name: getattr(checked, name) for name in ARRAYS})
        os.replace(temporary, path)
    except OSError as error:
        LOGGER.warning("%s: cannot write the label cache (%s), running without it", path, error)
        temporary.unlink(missing_ok=True)
        return False
    return True
