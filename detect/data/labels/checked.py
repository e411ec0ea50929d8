"""The label check of a whole split, run in parallel, and what it found, flat: sizes, label rows, background flags,
and the few problems."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import os
import signal
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from itertools import repeat

import numpy as np

from detect.data.labels import check
from detect.data.labels.check import MISSING_LABELS, CheckResult
from detect.data.storage.local import LOCAL, Storage

LOGGER = logging.getLogger(__name__)
# From this many images the check runs in processes (below, threads overlap the file reads of a network disk).
PROCESS_POOL_FROM = 5_000
# Images a check process takes at a time: a stop (SIGTERM) waits for the chunks under way, tens of ms each (about 1 ms
# an image, docs/scale.md), while 3,700 chunks for COCO's 118k images cost well under a second of hand-offs.
CHECK_CHUNK = 32
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


@dataclasses.dataclass(frozen=True, eq=False)
class CheckedImages:
    """N checked images in listing order: widths, heights (N,) int32, offsets (N + 1,) int64 into rows (M, 5)
    float32 and crowd (M,) bool, background (N,) bool, and one dict per image with anything to report
    ({"index", "skipped", "fixes", "notes", "details"}; most images have none, so this list stays short)."""

    widths: np.ndarray
    heights: np.ndarray
    offsets: np.ndarray
    rows: np.ndarray
    crowd: np.ndarray
    background: np.ndarray
    problems: list[dict]

    @classmethod
    def from_results(cls, results: Sequence[CheckResult]) -> CheckedImages:
        """Flatten per-image results (a skipped image keeps no rows)."""
        kept = [result.rows if result.skipped is None else result.rows[:0] for result in results]
        offsets = np.zeros(len(results) + 1, np.int64)
        np.cumsum([len(rows) for rows in kept], out=offsets[1:])
        crowd = [result.crowd[:len(rows)] for result, rows in zip(results, kept)]
        problems = [{"index": index, "skipped": result.skipped, "fixes": result.fixes, "notes": result.notes,
                     "details": result.details} for index, result in enumerate(results)
                    if result.skipped or result.fixes or result.notes or result.details]
        return cls(widths=np.array([result.width for result in results], np.int32),
                   heights=np.array([result.height for result in results], np.int32), offsets=offsets,
                   rows=np.concatenate(kept or [np.zeros((0, 5), np.float32)]).astype(np.float32).reshape(-1, 5),
                   crowd=np.concatenate(crowd or [np.zeros(0, bool)]).astype(bool),
                   background=np.array([result.background for result in results], bool), problems=problems)

    @property
    def usable(self) -> np.ndarray:
        """(N,) bool: not skipped."""
        usable = np.ones(len(self.widths), bool)
        usable[[problem["index"] for problem in self.problems if problem["skipped"]]] = False
        return usable


def summarise(split: str, images: Sequence[str], checked: CheckedImages, cache_state: str,
              unlisted: Sequence[tuple[str, str]] = (), noted: Mapping[str, int] | None = None,
              noted_details: Sequence[str] = ()) -> tuple[dict[str, int], list[str]]:
    """(counts by problem name, detail lines), and the summary table logged. `unlisted` are the (path, why) of the
    entries the listing could not take (a broken or looping link, an unreadable folder, a FIFO named x.jpg): each
    is found and skipped, by its reason. `noted` counts what reading a label file left out (data/annotations), by
    name, with its `noted_details` lines."""
    usable = checked.usable
    counts = collections.Counter(found=len(usable), background=int((checked.background & usable).sum()), fixed=0,
                                  skipped=0)
    counts.update({f"label file: {name}": count for name, count in (noted or {}).items()})
    details = [*noted_details, *_count_unlisted(unlisted, counts)]
    for problem in checked.problems:
        path, skipped = images[problem["index"]], problem["skipped"]
        if skipped:
            counts[f"skipped: {skipped}"] += 1
        counts.update(f"fixed: {fix}" for fix in problem["fixes"])
        counts.update(("background: " if note == MISSING_LABELS else "note: ") + note for note in problem["notes"])
        counts["fixed"] += bool(problem["fixes"]) and not skipped
        counts["skipped"] += bool(skipped)
        details += problem["details"] or ([f"{path}: {skipped}"] if skipped else [])
        details += [f"{path}: {note}" for note in problem["notes"]]
    counts["usable"] = counts["found"] - counts["skipped"]
    lines = [f"label check, {split} split (cache {cache_state}):"]
    lines += [f"  {key:<40} {counts[key]:>8}" for key in ("found", "usable", "background", "fixed", "skipped")]
    lines += [f"  {key:<40} {value:>8}" for key, value in sorted(counts.items()) if ":" in key]
    LOGGER.info("\n".join(lines))
    return dict(counts), details


def _count_unlisted(unlisted: Sequence[tuple[str, str]], counts: collections.Counter) -> list[str]:
    """Count the entries the listing skipped as found and skipped (by reason); their detail lines."""
    counts["found"] += len(unlisted)
    counts["skipped"] += len(unlisted)
    counts.update(f"skipped: {why}" for _, why in unlisted)
    return [f"{path}: {why}" for path, why in unlisted]


def check_images(images: list[str], labels: list[str | None], given: list, num_classes: int,
                 bounds: check.ImageBounds, storage: Storage = LOCAL) -> CheckedImages:
    """Check every image (check.check_image). Local files: in a process pool for a large split (the check is mostly
    Python, which threads would run one at a time), else in threads (they overlap file reads, which is what a small
    split on a network disk waits on). A storage that fetches (a bucket): its check_threads at a time, each fetching
    its image and label file first (a label file the storage does not hold is a missing one)."""
    if storage.check_threads:
        def fetched(image: str, label: str | None, rows: tuple | None) -> check.CheckResult:
            label = label if label is not None and storage.holds(label) else None
            for path in (image, label):
                if path is not None:
                    with contextlib.suppress(FileNotFoundError):  # deleted since the listing: the check names it
                        storage.fetch(path)
            return check.check_image(image, label, num_classes, rows, bounds)

        with ThreadPoolExecutor(storage.check_threads) as pool:
            return CheckedImages.from_results(list(pool.map(fetched, images, labels, given)))
    arguments = (images, labels, repeat(num_classes), given, repeat(bounds))
    if len(images) >= PROCESS_POOL_FROM and (os.cpu_count() or 1) > 1:
        # fork, as yolov5 and our DataLoader workers: no re-import of __main__ (a script needs no main guard), no
        # start-up cost; the check runs no torch op and no parallel cv2 call, so no inherited thread pool is used
        pool: Executor = ProcessPoolExecutor(os.cpu_count(), mp_context=multiprocessing.get_context("fork"),
                                             initializer=_checker_start)
        chunksize = CHECK_CHUNK
    else:
        pool, chunksize = ThreadPoolExecutor(min(8, (os.cpu_count() or 1) * 2)), 1
    try:
        return CheckedImages.from_results(list(pool.map(check.check_image, *arguments, chunksize=chunksize)))
    finally:  # a stop during the check (SIGTERM) cancels the queued chunks; the running ones end, then the workers
        pool.shutdown(cancel_futures=True)


def _checker_start() -> None:
    """A label-check process leaves SIGTERM and Ctrl-C to the main process (which ends the pool) and dies with it,
    so none is left behind when the main process is killed."""
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):  # prctl is Linux's
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
