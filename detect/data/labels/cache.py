"""The label-check cache: keyed by a hash of file paths, sizes and mtimes and CACHE_VERSION; never trusted stale."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path

import numpy as np

from detect.data.labels.check import CheckResult

LOGGER = logging.getLogger(__name__)

# Bump when check.py changes what it accepts or stores: every old cache is then rebuilt.
CACHE_VERSION = "detect-labels-2"  # 2: a non-finite value skips the image (was a zero-area fix)


def fingerprint(files: list[Path | None], num_classes: int) -> str:
    """sha256 of (path, size, mtime) of every file (None or missing counts too), the class count and version."""
    digest = hashlib.sha256(f"{CACHE_VERSION}|{num_classes}".encode())
    for path in files:
        try:
            info = os.stat(path) if path is not None else None
            entry = f"{path}|{info.st_size}|{info.st_mtime_ns}" if info else "none"
        except OSError:
            entry = f"{path}|missing"
        digest.update(entry.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def folder_writable(folder: Path) -> bool:
    """True if we may write in `folder`; a folder without write bits counts as read-only even for root."""
    try:
        mode = os.stat(folder).st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IWUSR) and os.access(folder, os.W_OK)


def _encode(result: CheckResult) -> dict:
    entry = dict(vars(result))
    entry["rows"] = result.rows.tolist()
    entry["crowd"] = result.crowd.tolist()
    return entry


def _decode(entry: dict) -> CheckResult:
    entry = dict(entry)
    entry["rows"] = np.array(entry["rows"], np.float32).reshape(-1, 5)
    entry["crowd"] = np.array(entry["crowd"], bool)
    return CheckResult(**entry)


def read_cache(path: Path, expected: str) -> list[CheckResult] | None:
    """The cached results if the cache exists, parses and matches `expected`; else None (rebuild)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("version") != CACHE_VERSION or data.get("fingerprint") != expected:
            LOGGER.info("%s: stale label cache, rebuilding", path)
            return None
        return [_decode(entry) for entry in data["results"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        LOGGER.warning("%s: unreadable label cache (%s), rebuilding", path, error)
        return None


def write_cache(path: Path, key: str, results: list[CheckResult]) -> bool:
    """Write atomically (temp + rename); a read-only folder gives a warning and no cache."""
    if not folder_writable(path.parent):
        LOGGER.warning("%s: folder is not writable, running without a label cache", path.parent)
        return False
    temporary = path.with_name(path.name + f".{os.getpid()}.tmp")
    try:
        temporary.write_text(json.dumps({"version": CACHE_VERSION, "fingerprint": key,
                                         "results": [_encode(result) for result in results]}))
        os.replace(temporary, path)
    except OSError as error:
        LOGGER.warning("%s: cannot write the label cache (%s), running without it", path, error)
        temporary.unlink(missing_ok=True)
        return False
    return True
