"""Stopping and saving inside an epoch. SIGTERM (what a scheduler or a cloud sends before it takes the machine) and
SIGINT (Ctrl-C) ask every rank to stop at the next step boundary, where rank 0 writes last.pt; a second Ctrl-C ends
at once. --save-minutes asks rank 0 for a mid-epoch last.pt on a timer. The loop reads both once a step and the
ranks agree on them in the step's one all-reduce (loop.py), so every rank acts at the same iteration."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator

LOGGER = logging.getLogger(__name__)
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Requests:
    """What this rank asks of the job at the next step boundary: to stop (a signal came) or to save (timer due)."""

    def __init__(self, save_minutes: float = 0.0, keeps_time: bool = True) -> None:
        """keeps_time: whether this rank's clock decides the saves (rank 0's does; the others follow it)."""
        self.signal_number: int | None = None
        self.period = save_minutes * 60 if keeps_time else 0.0
        self.next_save = time.monotonic() + self.period

    @property
    def stop(self) -> bool:
        return self.signal_number is not None

    @property
    def save(self) -> bool:
        return self.period > 0 and time.monotonic() >= self.next_save

    def saved(self) -> None:
        """Start the next period of the save timer."""
        self.next_save = time.monotonic() + self.period

    def receive(self, number: int, _frame: object = None) -> None:
        """The signal handler: the first signal asks for a stop; after a first SIGINT the next one raises
        KeyboardInterrupt at once (a checkpoint being written stays whole: it is renamed into place)."""
        if self.signal_number is None:
            self.signal_number = number
            LOGGER.warning("%s: stopping at the next step boundary (Ctrl-C again to end at once)",
                           signal.Signals(number).name)
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def handle_signals(requests: Requests) -> Iterator[Requests]:
    """SIGTERM and SIGINT go to `requests` while the block runs (main thread only: Python's rule for handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield requests
        return
    previous = {number: signal.signal(number, requests.receive) for number in SIGNALS}
    try:
        yield requests
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
