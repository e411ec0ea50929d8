"""One way to write a file that other processes read (ranks, loader workers, other nodes on shared storage): into a
temporary file beside it, then renamed over it, so that a reader sees the old file or the new one, never half."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

# Every temporary file ends so: a folder's listing can leave out files being written (data/storage/object_cache.py).
TEMPORARY_SUFFIX = ".tmp"


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A hidden temporary path beside `path`, unique to this writer, to write; when the block ends normally it
    replaces `path` (os.replace: atomic on one filesystem), otherwise it is removed and the error goes on."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}{TEMPORARY_SUFFIX}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
