"""The frames of a source tracked one by one: each frame's sequence found, its detections tracked in that sequence's
state (Detector.track), the outputs written; unreadable frames are counted and skipped (the sequence's clock goes
on, so its tracks may still meet their objects again), a progress bar shows the frames per second."""

from __future__ import annotations

import dataclasses
import logging
import time

from tqdm import tqdm

from detect.inference.detector import Detector
from detect.inference.slicing import TooManyWindows
from detect.inference.sources import Source
from detect.inference.tracks.outputs import TrackOutputs
from detect.inference.tracks.settings import TrackerSettings

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass
class TrackingRun:
    """What a run tracked: frames tracked, the problems of those skipped, and the seconds they took."""

    frames: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds else 0.0


def track_frames(source: Source, detector: Detector, tracker: TrackerSettings, outputs: TrackOutputs,
                 progress: bool = True) -> TrackingRun:
    """Track every frame of `source` into `outputs`; Ctrl-C ends a live source as its end would."""
    run = TrackingRun()
    bar = tqdm(source, unit="frame", disable=not progress, dynamic_ncols=True)
    try:
        for frame in bar:
            sequence = outputs.sequence(frame)
            if frame.image is None:
                LOGGER.warning("%s skipped: %s", sequence.name, frame.problem)
                run.problems.append(frame.problem)
                continue
            start = time.perf_counter()
            try:
                tracks = detector.track(frame.image, sequence.key, tracker, sequence.fps,
                                        timestamp=(sequence.frames - 1) / sequence.fps)
            except TooManyWindows as error:  # --slice: this frame alone is skipped, by name
                LOGGER.warning("%s frame %d skipped: %s", sequence.name, sequence.frames, error)
                run.problems.append(f"{frame.name} frame {sequence.frames}: {error}")
                continue
            run.seconds += time.perf_counter() - start
            run.frames += 1
            outputs.add(sequence, frame, tracks)
            bar.set_postfix_str(f"{sequence.name}: {len(tracks)} tracks", refresh=False)
    except KeyboardInterrupt:
        if not source.live:
            raise
        LOGGER.info("stopped (Ctrl-C)")
    finally:
        bar.close()
    return run
