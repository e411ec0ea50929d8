"""The label-check cache: flat numpy arrays in one .npz, keyed by a hash of the split's file list, every file's size
and mtime, the class count and CACHE_VERSION, with a checksum of its contents; never trusted stale or corrupt; and
the check's details file beside it. Where they go: storage/cache_places.py."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from detect.atomic_file import make_folder, replacing, write_text
from detect.data.labels.check import DEFAULT_BOUNDS, CheckedImages, ImageBounds
from detect.data.storage.cache_places import CACHE_DIR_VARIABLE, folder_writable

LOGGER = logging.getLogger(__name__)

# Bump when check.py changes what it accepts or stores, or the file layout changes: every old cache is then rebuilt.
# 6: images over --max-pixels are skipped (the limit is in the key); 5: a label file that is there but cannot be
# read (a broken link, a FIFO) skips its image (was: background); 4: a checksum of the contents; 3: flat arrays in an
# .npz (was json); 2: a non-finite value skips the image.
CACHE_VERSION = "detect-labels-6"
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


def fingerprint(files: Sequence[str], num_classes: int, bounds: ImageBounds = DEFAULT_BOUNDS,
                names: Sequence[str] = (), stats: np.ndarray | None = None) -> str:
    """sha256 of the version, the class count, the image bounds, the class `names` if given, the paths in order and
    each file's (size, mtime_ns) (or missing): stat'ed here, or `stats` as a bucket's listing gives them."""
    if stats is None:
        chunks = [files[start:start + STAT_CHUNK] for start in range(0, len(files), STAT_CHUNK)]
        with ThreadPoolExecutor(min(STAT_THREADS, max(1, len(chunks)))) as pool:
            stats = list(pool.map(_stat_chunk, chunks))
    else:
        stats = [stats]
    digest = hashlib.sha256(f"{CACHE_VERSION}|{num_classes}|{bounds.max_pixels}|{bounds.max_boxes}|{len(files)}\n"
                            .encode())
    if names:
        digest.update(("\n".join(names) + "\n\n").encode("utf-8", "surrogateescape"))
    digest.update("\n".join(files).encode("utf-8", "surrogateescape"))
    for found in stats:
        digest.update(found.tobytes())
    return digest.hexdigest()


def checksum(key: str, problems: str, arrays: Mapping[str, np.ndarray]) -> str:
    """sha256 of the key, the problems' json and each array's name, dtype, shape and bytes."""
    digest = hashlib.sha256(f"{CACHE_VERSION}|{key}|{problems}".encode("utf-8", "surrogateescape"))
    for name in ARRAYS:
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"|{name}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.data)
    return digest.hexdigest()


def read_cache(path: Path, expected: str) -> CheckedImages | None:
    """The cached check if the cache exists, parses, matches `expected` and its checksum; else None (rebuild).
    Never raises: any unreadable or corrupt file is one warning line and a new check."""
    try:
        if not path.is_file():
            return None
        with np.load(path, allow_pickle=False) as data:
            if str(data["version"]) != CACHE_VERSION or str(data["key"]) != expected:
                LOGGER.info("%s: stale label cache, rebuilding", path)
                return None
            arrays, problems = {name: data[name] for name in ARRAYS}, str(data["problems"])
            if str(data["checksum"]) != checksum(expected, problems, arrays):
                raise ValueError("its checksum does not match its contents")
            return CheckedImages(**arrays, problems=json.loads(problems))
    except Exception as error:  # noqa: BLE001 (a corrupt zip or .npy header fails zipfile's or numpy's parser in
        # any way: NotImplementedError, TokenError, ...)
        reason = (str(error).splitlines() or [""])[0]
        LOGGER.warning("%s: unreadable label cache (%s: %s), rebuilding", path, type(error).__name__, reason)
        return None


def keep(path: Path, key: str, checked: CheckedImages | None, details: list[str]) -> tuple[str, Path | None]:
    """What a check leaves in `path`'s folder, made if missing: the cache of a check just run (`checked`; None: it
    was loaded from `path`), written atomically (temp + rename), and beside it the check's details
    (<cache>.problems.txt, where there are any). A read-only folder gives a warning and neither. The cache's state
    ("loaded", "written" or "not written") and the details file (None where none was written)."""
    state = "loaded" if checked is None else "not written"
    if checked is None and not details:
        return state, None
    if checked is not None:
        arrays, problems = {name: getattr(checked, name) for name in ARRAYS}, json.dumps(checked.problems)
        digest = checksum(key, problems, arrays)
    with contextlib.suppress(OSError):  # a folder that cannot be made is named by the warning below
        make_folder(path.parent, cache=True)
    if not folder_writable(path.parent):
        LOGGER.warning("%s: folder is not writable, running without %s (--cache-dir or %s can name a writable one)",
                       path.parent, "the label-check details" if checked is None else "a label cache",
                       CACHE_DIR_VARIABLE)
        return state, None
    if checked is not None:
        try:
            with replacing(path, cache=True) as temporary, open(temporary, "wb") as handle:
                np.savez(handle, version=np.array(CACHE_VERSION), key=np.array(key), problems=np.array(problems),
                         checksum=np.array(digest), **arrays)
            state = "written"
            LOGGER.info("%s: label cache written", path)
        except OSError as error:
            LOGGER.warning("%s: cannot write the label cache (%s), running without it", path, error)
    if not details:
        return state, None
    target = path.with_suffix(".problems.txt")
    try:
        write_text(target, "\n".join(details) + "\n", cache=True)
    except OSError as error:
        LOGGER.warning("%s: cannot write the label-check details (%s)", target, error)
        return state, None
    LOGGER.info("label-check details: %s", target)
    return state, target
