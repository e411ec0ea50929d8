"""The label check of a whole split, run in parallel: local files in processes or threads, a bucket's fetched as
they are checked."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from itertools import repeat

from detect.data.labels import check
from detect.data.labels.check import CheckedImages
from detect.data.storage.interface import Storage
from detect.data.storage.local import LOCAL

LOGGER = logging.getLogger(__name__)
# From this many images the check runs in processes (below, threads overlap the file reads of a network disk).
PROCESS_POOL_FROM = 5_000
# Images a check process takes at a time: a stop (SIGTERM) waits for the chunks under way, tens of ms each (about 1 ms
# an image, docs/scale.md), while 3,700 chunks for COCO's 118k images cost well under a second of hand-offs.
CHECK_CHUNK = 32
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


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
