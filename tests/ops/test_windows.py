"""The window grid that tiled training and sliced inference share: even, overlapping, inside the image."""

from __future__ import annotations

import numpy as np
import pytest

from detect.ops.windows import window_count, window_grid, window_starts


@pytest.mark.parametrize(("length", "size", "overlap"), [(2048, 640, 0.2), (4096, 640, 0.25), (641, 640, 0.2),
                                                         (3000, 512, 0.0), (1000, 100, 0.5)])
def test_windows_cover_the_side_overlap_at_least_as_asked_and_end_flush(length, size, overlap):
    starts = window_starts(length, size, overlap)
    assert starts[0] == 0 and starts[-1] == length - size  # the last one shifted inside, not padded past the edge
    overlaps = size - np.diff(starts)
    assert (overlaps >= int(size * overlap)).all()  # neighbours share at least the asked share
    assert (np.diff(starts) > 0).all()  # no window twice
    covered = np.zeros(length, bool)
    for start in starts:
        covered[start:start + size] = True
    assert covered.all()


def test_a_side_that_fits_is_one_window_over_it_whole():
    grid = window_grid(300, 500, 640, 0.2)
    assert grid.tolist() == [[0, 0, 500, 300]]
    grid = window_grid(300, 2000, 640, 0.2)  # a strip: windows along x, each the image's whole height
    assert (grid[:, 1] == 0).all() and (grid[:, 3] == 300).all() and (grid[:, 2] - grid[:, 0] == 640).all()


def test_the_grid_is_row_by_row_and_counted_without_being_made():
    grid = window_grid(1500, 2000, 640, 0.2)
    assert len(grid) == window_count(1500, 2000, 640, 0.2) == 3 * 4
    assert grid[:4, 1].tolist() == [0] * 4 and grid[:4, 0].tolist() == sorted(grid[:4, 0].tolist())
    assert ((grid[:, 2:] - grid[:, :2]) == 640).all()
    assert window_count(16000, 16000, 640, 0.2) == 31 * 31  # the default --max-windows (1024) lets it through
