"""The wall time of each phase of a run besides its training steps, logged at its end."""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator


class PhaseTimes:
    """Wall seconds per phase of a run (label check, AutoAnchor, training, validation, saves, final evaluation,
    plots), logged at its end: where a run's time goes besides its training steps."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.started = time.perf_counter()

    @contextlib.contextmanager
    def time(self, phase: str) -> Iterator[None]:
        """Add the block's wall time to `phase`."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - started

    def line(self) -> str:
        """`phases: training 91.2 s, validation 12.0 s, ... (run 110.4 s)`, longest first."""
        parts = [f"{phase} {seconds:.1f} s" for phase, seconds in sorted(self.seconds.items(), key=lambda x: -x[1])]
        return f"phases: {', '.join(parts)} (run {time.perf_counter() - self.started:.1f} s)"
