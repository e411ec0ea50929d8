"""Tracking state per stream, on detections made by hand (no model): ids kept along a stream, one state per stream
however their frames interleave, a reset, frames whose size changes, and the one line when the library is missing."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import tomllib
from packaging.requirements import Requirement

from detect.errors import UserError
from detect.inference.tracks import library
from detect.inference.tracks.settings import BoTSORTSettings, ByteTrackSettings, OCSORTSettings
from detect.inference.tracks.streams import TRAIL_FRAMES, StreamTracker, StreamTrackers

NAMES = ("person", "car")
FRAME = np.zeros((240, 320, 3), np.uint8)


def moving_objects(frame: int, shift: float = 0.0) -> np.ndarray:
    """Two boxes crossing the frame in opposite directions: (2, 6) [x1, y1, x2, y2, score, class]."""
    return np.array([[10 + 4 * frame, 50 + shift, 50 + 4 * frame, 130 + shift, 0.9, 0],
                     [250 - 4 * frame, 120 + shift, 300 - 4 * frame, 160 + shift, 0.8, 1]], np.float32)


def ids_by_class(tracks) -> dict[int, int]:
    return dict(zip(tracks.classes.tolist(), tracks.ids.tolist()))


@pytest.mark.parametrize("settings", [ByteTrackSettings(), OCSORTSettings(), BoTSORTSettings()])
def test_each_object_keeps_its_id_along_a_stream(settings):
    tracker = StreamTracker(settings, NAMES)
    seen = [ids_by_class(tracker.update(moving_objects(frame), FRAME)) for frame in range(20)]
    confirmed = [ids for ids in seen if len(ids) == 2]
    assert len(confirmed) >= 18  # from the first or second frame on (minimum_consecutive_frames 2)
    assert all(ids == confirmed[0] for ids in confirmed) and sorted(confirmed[0].values()) == [1, 2]


def test_the_tracks_are_the_detections_in_the_frames_pixels():
    tracker = StreamTracker(ByteTrackSettings(), NAMES)
    for frame in range(3):
        tracks = tracker.update(moving_objects(frame), FRAME)
    order = np.argsort(tracks.classes)
    np.testing.assert_allclose(tracks.rows[order], moving_objects(2), atol=1e-4)
    assert tracks.names == NAMES and len(tracks) == 2


def test_streams_interleaved_keep_a_state_each():
    alone = []
    for shift in (0.0, 40.0):
        tracker = StreamTracker(ByteTrackSettings(), NAMES)
        alone.append([tracker.update(moving_objects(frame, shift), FRAME) for frame in range(10)])
    streams = StreamTrackers(NAMES)
    for frame in range(10):
        for stream, shift in (("a", 0.0), ("b", 40.0)):
            tracks = streams.get(stream, ByteTrackSettings()).update(moving_objects(frame, shift), FRAME)
            expected = alone[stream == "b"][frame]
            np.testing.assert_array_equal(tracks.ids, expected.ids)
            np.testing.assert_allclose(tracks.rows, expected.rows)
    assert {tuple(sorted(ids_by_class(tracks).values())) for tracks in alone[1][2:]} == {(1, 2)}  # ids per stream


def test_a_reset_starts_a_stream_afresh_and_leaves_the_others():
    streams = StreamTrackers(NAMES)
    for frame in range(5):
        streams.get("a", ByteTrackSettings()).update(moving_objects(frame), FRAME)
        streams.get("b", ByteTrackSettings()).update(moving_objects(frame), FRAME)
    streams.get("a", ByteTrackSettings()).update(moving_objects(10, 100.0)[:1], FRAME)  # a third object: id 3
    streams.reset("a")
    fresh = [streams.get("a", ByteTrackSettings()).update(moving_objects(20 + frame, 100.0), FRAME) for frame in range(3)]
    assert sorted(fresh[-1].ids.tolist()) == [1, 2]
    assert sorted(streams.get("b", ByteTrackSettings()).update(moving_objects(5), FRAME).ids.tolist()) == [1, 2]
    streams.reset()
    assert streams.streams == {}


def test_other_settings_on_a_tracked_stream_are_refused():
    streams = StreamTrackers(NAMES)
    streams.get("cam", ByteTrackSettings())
    with pytest.raises(UserError, match="stream 'cam' is tracked with bytetrack's settings already"):
        streams.get("cam", OCSORTSettings())


def test_a_frame_of_another_size_keeps_its_tracks(caplog):
    tracker = StreamTracker(BoTSORTSettings(), NAMES)
    for frame in range(6):
        before = tracker.update(moving_objects(frame), FRAME)
    half = moving_objects(6)
    half[:, :4] /= 2  # the camera now sends 160x120 frames of the same scene
    after = tracker.update(half, FRAME[::2, ::2].copy())
    assert ids_by_class(after) == ids_by_class(before) and tracker.resized == 1
    np.testing.assert_allclose(after.rows[np.argsort(after.classes)], half, atol=1e-4)  # in the frame's own pixels
    assert "a frame of 160x120 in a stream of 320x240" in caplog.text


def test_trails_keep_the_last_centres():
    tracker = StreamTracker(ByteTrackSettings(), NAMES)
    for frame in range(TRAIL_FRAMES + 10):
        tracks = tracker.update(moving_objects(frame % 30), FRAME)  # the boxes jump back once: a new pair of ids
    for track_id, trail in tracks.trails.items():
        assert trail.shape[1] == 2 and 1 <= len(trail) <= TRAIL_FRAMES
        box = tracks.boxes[list(tracks.ids).index(track_id)]
        np.testing.assert_allclose(trail[-1], [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2])


def test_without_the_library_tracking_is_one_line_naming_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "trackers", None)  # what Python does for a package that is not installed
    with pytest.raises(UserError) as caught:
        StreamTracker(ByteTrackSettings(), NAMES)
    assert str(caught.value) == f"tracking needs the trackers library (trackers is missing): {library.INSTALL}"


def test_the_track_extra_holds_what_the_library_needs_but_its_opencv():
    """trackers asks for opencv-python; we keep opencv-python-headless, so it is installed --no-deps and the extra must
    bring the rest of its requirements: this fails when a new trackers needs something the extra lacks."""
    pyproject = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    extra = {Requirement(text).name for text in pyproject["project"]["optional-dependencies"]["track"]}
    needed = {Requirement(text).name for text in metadata.requires("trackers") if "extra ==" not in text}
    assert needed - extra == {"opencv-python"}
    assert {"opencv-python-headless"} <= {Requirement(text).name for text in pyproject["project"]["dependencies"]}
    supervision = {Requirement(text).name for text in metadata.requires("supervision") if "extra ==" not in text}
    assert "opencv-python" not in supervision  # before 0.30 it asked for it: the extra's bound keeps it out
    assert metadata.version("trackers") == library.INSTALL.split("==")[1].strip('"')
