"""What `python -m detect.track` writes into its run folder, per sequence (a video, a stream, a folder of frames): a
MOTChallenge text file `<name>.txt` (frame, id, x, y, w, h, conf, class: one line a track a frame, pixels, frames
from 1) and, unless --nosave, `<name>.mp4` with the boxes, ids and trails."""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Hashable
from pathlib import Path
from typing import TextIO

import cv2
import numpy as np

from detect.atomic_file import VideoFile, open_stream
from detect.inference.media import Frame
from detect.inference.tracks.drawing import draw_tracks
from detect.inference.tracks.streams import Tracks
from detect.run_dir import safe_name

LOGGER = logging.getLogger(__name__)
FALLBACK_FPS = 30.0  # a folder of frames, or a video that does not say its rate


@dataclasses.dataclass
class TrackedSequence:
    """One tracked sequence: its stream key, file name, frame rate (of its numbering), and frames seen so far."""

    key: Hashable
    name: str
    fps: float
    live: bool = False  # a live stream
    frames: int = 0  # the number of its latest frame (a folder's: frames read or not so far); MOT's, from 1
    tracked: int = 0  # frames tracked
    ids: dict[int, int] = dataclasses.field(default_factory=dict)  # track id -> its class, when first seen


def sequence_key(frame: Frame) -> tuple[Hashable, str]:
    """A frame's sequence: a video or stream is its own; image files are one sequence per folder."""
    if frame.video:
        return (frame.position, str(frame.path)), frame.path.stem
    folder = frame.path.parent
    return str(folder), folder.resolve().name or "frames"


def mot_lines(number: int, tracks: Tracks) -> str:
    """MOTChallenge rows of one frame: frame, id, left, top, width, height, conf, class (pixels, 2 decimals)."""
    rows = []
    for track_id, (x1, y1, x2, y2), score, cls in zip(tracks.ids.tolist(), tracks.boxes.tolist(),
                                                      tracks.scores.tolist(), tracks.classes.tolist()):
        rows.append(f"{number},{track_id},{x1:.2f},{y1:.2f},{x2 - x1:.2f},{y2 - y1:.2f},{score:.4f},{cls}\n")
    return "".join(rows)


class TrackOutputs:
    """The run folder's MOT files and videos, one of each per sequence, written frame by frame."""

    def __init__(self, save_dir: Path, save_videos: bool, vid_stride: int = 1, line_thickness: int = 2) -> None:
        self.save_dir, self.save_videos = save_dir, save_videos
        self.vid_stride, self.line_thickness = vid_stride, line_thickness
        self.sequences: dict[Hashable, TrackedSequence] = {}
        self._mot: dict[Hashable, TextIO] = {}
        self._videos: dict[Hashable, VideoFile] = {}

    def sequence(self, frame: Frame) -> TrackedSequence:
        """The frame's sequence (made at its first frame), its frame count advanced to this frame."""
        key, stem = sequence_key(frame)
        found = self.sequences.get(key)
        if found is None:
            taken = {sequence.name for sequence in self.sequences.values()}
            name, number = safe_name(stem, "sequence"), 2
            while name in taken:
                name, number = f"{safe_name(stem, 'sequence')}_{number}", number + 1
            rate = frame.fps * self.vid_stride if frame.video and frame.fps > 0 else FALLBACK_FPS
            found = self.sequences[key] = TrackedSequence(key, name, rate, frame.stream)
        found.frames = frame.index + 1 if frame.video else found.frames + 1
        return found

    def add(self, sequence: TrackedSequence, frame: Frame, tracks: Tracks) -> None:
        """One frame's tracks: its MOT rows, and its drawn frame in the sequence's video."""
        sequence.tracked += 1
        for track_id, cls in zip(tracks.ids.tolist(), tracks.classes.tolist()):
            sequence.ids.setdefault(track_id, cls)
        mot = self._mot.get(sequence.key)
        if mot is None:  # opened at the first frame read: a video that cannot be opened leaves no file
            mot = self._mot[sequence.key] = open_stream(self.save_dir / f"{sequence.name}.txt")
        mot.write(mot_lines(sequence.frames, tracks))
        mot.flush()  # a stopped run keeps every frame it tracked
        if self.save_videos:
            self._write_video(sequence, draw_tracks(frame.image, tracks, self.line_thickness))

    def _write_video(self, sequence: TrackedSequence, image: np.ndarray) -> None:
        """The frame into its sequence's video; a frame of another size is resized to the video's (a video has
        one). A video or folder's sequence closes the one before it; live streams, whose frames take turns, stay
        open."""
        if sequence.key not in self._videos:
            if not sequence.live:
                self.close_videos()
            self._videos[sequence.key] = VideoFile(self.save_dir / f"{sequence.name}.mp4",
                                                   sequence.fps / self.vid_stride, (image.shape[1], image.shape[0]))
        video = self._videos[sequence.key]
        video.write(image if (image.shape[1], image.shape[0]) == video.size else cv2.resize(image, video.size))

    def close_videos(self) -> None:
        for video in self._videos.values():
            video.close()
        self._videos.clear()

    def finish(self) -> None:
        """Close every file."""
        self.close_videos()
        for mot in self._mot.values():
            mot.close()

    def summary(self, names: tuple[str, ...]) -> str:
        """'3 sequences, 240 frames, 17 tracks: 12 person, 5 car' (frames tracked; ids per class in class order)."""
        classes = collections.Counter(cls for sequence in self.sequences.values() for cls in sequence.ids.values())
        per_class = ", ".join(f"{classes[index]} {names[index]}" for index in sorted(classes))
        frames = sum(sequence.tracked for sequence in self.sequences.values())
        count = len(self.sequences)
        return (f"{count} sequence{'s' if count != 1 else ''}, {frames} frames, {sum(classes.values())} tracks"
                + (f": {per_class}" if per_class else ""))
