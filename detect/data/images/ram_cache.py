"""`--cache ram`: decoded, resized uint8 images in one flat buffer, after checking that they fit; under torchrun the
ranks of a node fill one buffer together (a file in /dev/shm that they all map), each decoding its share."""

from __future__ import annotations

import dataclasses
import logging
import mmap
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from detect.atomic_file import remove_file, replacing
from detect.data.images.load import load_resized, read_failure, resized_shapes
from detect.data.records import RecordTable
from detect.data.storage.interface import Storage
from detect.data.storage.local import LOCAL
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)

# Leave this share of the available memory to the model, the workers and the OS (a choice, not a measurement).
MEMORY_SHARE = 0.7
SHARED_MEMORY = Path("/dev/shm")  # where a node's ranks map their one buffer (tmpfs: memory, not disk)


@dataclasses.dataclass(frozen=True)
class NodeShare:
    """The ranks of one node filling one --cache ram buffer together: this rank's place among them, a barrier every
    rank of the job passes (training/ gives it: patient_barrier), and a name for the buffer, unique to the job."""

    local_rank: int
    local_world_size: int
    barrier: Callable[[str], None]
    name: str


def available_memory() -> int:
    """Bytes the kernel says a new allocation can get (MemAvailable), else free pages."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@dataclasses.dataclass(frozen=True, eq=False)
class RamImages:
    """N images in one uint8 buffer: image i is buffer[offsets[i]:][:prod(shapes[i])] as (h, w, 3). One array, not
    N: forked workers reading it never copy its pages (no per-image reference counts to write)."""

    buffer: np.ndarray
    offsets: np.ndarray
    shapes: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, index: int) -> np.ndarray:
        start, shape = int(self.offsets[index]), tuple(int(side) for side in self.shapes[index])
        return self.buffer[start:start + shape[0] * shape[1] * shape[2]].reshape(shape)

    def take(self, indices: np.ndarray) -> RamImages:
        """The images at `indices`, in that order (the buffer is shared, not copied)."""
        return RamImages(self.buffer, self.offsets[indices], self.shapes[indices])


def _load(path: str, imgsz: int | None, augment: bool, storage: Storage) -> np.ndarray:
    """One image for the cache; an unreadable one ends the start-up with one line naming it."""
    try:
        return load_resized(Path(path), imgsz, augment, storage)
    except Exception as error:  # noqa: BLE001 (a decoder may raise anything; the user gets one line)
        raise UserError(f"--cache ram: {read_failure(path, error)}") from None


def check_memory(records: RecordTable, imgsz: int | None, copies: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(heights, widths) of the resized images if `copies` of them fit in memory; else a UserError saying what they
    need."""
    heights, widths = resized_shapes(records.heights, records.widths, imgsz)
    needed, available = copies * int((heights * widths * 3).sum()), available_memory()
    if needed > MEMORY_SHARE * available:
        copied = f" ({copies} copies: /dev/shm cannot hold one for this node's ranks)" if copies > 1 else ""
        size = "full resolution" if imgsz is None else imgsz
        raise UserError(f"--cache ram needs {needed / 2**30:.1f} GiB for {len(records)} images at {size}{copied}, "
                        f"but only {available / 2**30:.1f} GiB is available; use --cache disk or no --cache")
    return heights, widths


def _shared_buffer(size: int, share: NodeShare) -> np.ndarray | None:
    """`size` bytes that every rank of the node maps: a file in /dev/shm that the node's first rank makes (its pages
    reserved, so that a full /dev/shm is an error here, not a SIGBUS later) and unlinks once every rank mapped it;
    None on every rank of the node when it cannot be made."""
    path = SHARED_MEMORY / f"detect-{share.name}.cache"
    if share.local_rank == 0:
        try:
            if not SHARED_MEMORY.is_dir():  # a machine without it: never made here (the writer makes folders)
                raise FileNotFoundError(f"no folder {SHARED_MEMORY}")
            with replacing(path) as temporary, open(temporary, "wb") as handle:
                os.posix_fallocate(handle.fileno(), 0, size)
        except OSError as error:
            LOGGER.info("--cache ram: %s cannot hold %.2f GiB (%s): each rank of this node decodes and holds its own "
                        "copy", SHARED_MEMORY, size / 2**30, error)
            remove_file(path)
    share.barrier(f"{share.name} made")
    buffer = None
    if path.exists():
        with open(path, "r+b") as handle:
            buffer = np.frombuffer(mmap.mmap(handle.fileno(), size), np.uint8)
    share.barrier(f"{share.name} mapped")
    if share.local_rank == 0:
        remove_file(path)  # the pages live on in the mappings (and forked workers'), freed with the last
    return buffer


def cache_images(records: RecordTable, imgsz: int | None, augment: bool, share: NodeShare | None = None,
                 storage: Storage = LOCAL) -> RamImages:
    """Decode and resize every image into memory; refuses in one line, saying what it needs, when they would not fit.
    With `share`, the node's ranks fill one shared buffer, each decoding every local_world_size-th image."""
    heights, widths = check_memory(records, imgsz)
    sizes = heights * widths * 3
    needed = int(sizes.sum())
    offsets = np.zeros(len(records), np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    buffer, mine = None, range(len(records))
    if share is not None:  # every rank of the job, so that all pass the same barriers
        buffer = _shared_buffer(needed, share)
        if buffer is not None:
            mine = range(share.local_rank, len(records), share.local_world_size)
        else:
            check_memory(records, imgsz, share.local_world_size)
    images = RamImages(np.empty(needed, np.uint8) if buffer is None else buffer, offsets,
                       np.stack([heights, widths, np.full_like(heights, 3)], 1))

    def fill(index: int) -> None:
        images[index][...] = _load(os.fsdecode(records.paths[index]), imgsz, augment, storage)

    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(fill, mine))
    if share is not None:
        share.barrier(f"{share.name} filled")
    shared = f", one copy for this node's {share.local_world_size} ranks" if buffer is not None else ""
    LOGGER.info("cached %d images in RAM (%.2f GiB%s)", len(records), needed / 2**30, shared)
    return images
