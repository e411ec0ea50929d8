"""--source screen as yolov5 reads it ('screen [N] [left top width height]'): grabbed with mss where a display and
mss are present (here a stand-in mss), else one line saying what it needs."""

from __future__ import annotations

import itertools
import sys
import types
from contextlib import closing

import numpy as np
import pytest

from detect import predict
from detect.errors import UserError
from detect.inference.sources import open_source


class StandInGrabber:
    """mss.mss(): two 200x100 screens side by side (monitors[0] is both), BGRA grabs that record their region."""

    def __init__(self) -> None:
        self.monitors = [{"left": 0, "top": 0, "width": 400, "height": 100},
                         {"left": 0, "top": 0, "width": 200, "height": 100},
                         {"left": 200, "top": 0, "width": 200, "height": 100}]
        self.regions: list[dict] = []
        self.closed = False

    def grab(self, region: dict) -> np.ndarray:
        self.regions.append(dict(region))
        return np.full((region["height"], region["width"], 4), (1, 2, 3, 255), np.uint8)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def stand_in_mss(monkeypatch):
    grabbers: list[StandInGrabber] = []
    module = types.ModuleType("mss")
    module.mss = lambda: grabbers.append(StandInGrabber()) or grabbers[-1]
    monkeypatch.setitem(sys.modules, "mss", module)
    monkeypatch.setenv("DISPLAY", ":0")
    return grabbers


@pytest.mark.parametrize("source, region", [
    ("screen", {"left": 0, "top": 0, "width": 400, "height": 100}),
    ("screen 2", {"left": 200, "top": 0, "width": 200, "height": 100}),
    ("screen 10 20 64 48", {"left": 10, "top": 20, "width": 64, "height": 48}),
    ("screen 2 10 20 64 48", {"left": 210, "top": 20, "width": 64, "height": 48}),
])
def test_the_screen_region_is_grabbed_frame_after_frame(stand_in_mss, source, region):
    with closing(open_source(source)) as frames:
        assert frames.live
        first, second = itertools.islice(frames, 2)
    (grabber,) = stand_in_mss
    assert grabber.regions == [region, region] and grabber.closed
    assert first.image.shape == (region["height"], region["width"], 3) and first.image[0, 0].tolist() == [1, 2, 3]
    assert (first.index, second.index, first.stream, first.name) == (0, 1, True, source)


def test_what_a_screen_source_needs_is_one_line(stand_in_mss, monkeypatch):
    with pytest.raises(UserError, match=r"--source screen 3: no screen 3 \(this display has screens 0-2\)"):
        open_source("screen 3")
    with pytest.raises(UserError, match="a screen is 'screen', 'screen N', 'screen left top width height'"):
        open_source("screen 1 2")
    monkeypatch.setitem(sys.modules, "mss", None)  # not installed
    with pytest.raises(UserError, match="--source screen: the screen is grabbed with the mss package: pip install mss"):
        open_source("screen")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="$DISPLAY is the X11/Wayland session's")
def test_predict_on_the_screen_without_a_display_is_one_line_exit_2(weights, tmp_path, monkeypatch, capsys):
    # yolov5's `detect.py --source screen`, on a machine with no display
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.chdir(tmp_path)
    assert predict.main(["--weights", str(weights), "--source", "screen", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "--source screen: grabbing the screen needs a display, and this session has none ($DISPLAY is not set)" in err
    assert not (tmp_path / "runs").exists()
