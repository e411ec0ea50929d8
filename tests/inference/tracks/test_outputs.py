"""What detect.track writes, without a model: MOTChallenge rows, one sequence per video, stream or folder of frames
(numbered as MOTChallenge numbers frames), unique file names, and the summary line."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from detect.inference.media import Frame
from detect.inference.tracks.outputs import TrackOutputs, mot_lines
from detect.inference.tracks.streams import Tracks

IMAGE = np.zeros((48, 64, 3), np.uint8)
NAMES = ("person", "car")


def tracks(*rows: tuple[float, ...]) -> Tracks:
    """Tracks from (x1, y1, x2, y2, score, class, id) rows."""
    table = np.array(rows, np.float32).reshape(-1, 7)
    return Tracks(table[:, :6], table[:, 6].astype(np.int64), NAMES)


def test_mot_rows_are_frame_id_left_top_width_height_conf_class():
    text = mot_lines(7, tracks((10, 20, 40, 60, 0.875, 1, 3), (0.5, 1, 2.25, 4, 0.5, 0, 12)))
    assert text == "7,3,10.00,20.00,30.00,40.00,0.8750,1\n7,12,0.50,1.00,1.75,3.00,0.5000,0\n"
    assert mot_lines(1, tracks()) == ""


def test_each_video_stream_and_folder_is_a_sequence_numbered_as_motchallenge_numbers_it(tmp_path):
    outputs = TrackOutputs(tmp_path, save_videos=False, vid_stride=2)
    first = Frame(Path("a/walk.mp4"), IMAGE, index=1, count=10, fps=12.5, position=1, total=3)
    second = Frame(Path("b/walk.mp4"), IMAGE, index=3, count=10, fps=12.5, position=2, total=3)
    folder = [Frame(Path(f"shots/{n}.jpg"), IMAGE if n != 2 else None, position=3, total=3) for n in range(1, 4)]
    walk = outputs.sequence(first)
    assert (walk.name, walk.frames, walk.fps) == ("walk", 2, 25.0)  # the video's own number, its full rate
    other = outputs.sequence(second)
    assert (other.name, other.frames) == ("walk_2", 4)  # the same stem, another file
    numbers = [outputs.sequence(frame).frames for frame in folder]
    assert numbers == [1, 2, 3]  # a skipped frame keeps its number
    assert [sequence.name for sequence in outputs.sequences.values()] == ["walk", "walk_2", "shots"]
    outputs.add(walk, first, tracks((1, 2, 3, 4, 0.9, 0, 1)))
    outputs.add(other, second, tracks((1, 2, 3, 4, 0.9, 1, 1), (5, 6, 7, 8, 0.8, 1, 2)))
    outputs.finish()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["walk.txt", "walk_2.txt"]  # none for a frameless folder
    assert (tmp_path / "walk.txt").read_text() == "2,1,1.00,2.00,2.00,2.00,0.9000,0\n"
    assert outputs.summary(NAMES) == "3 sequences, 2 frames, 3 tracks: 1 person, 2 car"  # frames tracked
