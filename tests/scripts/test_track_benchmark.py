"""scripts/track_sequences.py and scripts/track_benchmark.py at small size: the sequences' truth follows the objects
(entering, leaving, hidden), and the truth itself given as detections is tracked and scored near 1 (our trackers and
the evaluator agree on what a perfect run is)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.scripts.modules import script
from tests.shared_data import COCO128, needs_shared

pytestmark = needs_shared


def read_rows(path) -> np.ndarray:
    return np.loadtxt(path, delimiter=",", ndmin=2)


def test_a_crossing_has_objects_that_enter_leave_and_hide(tmp_path):
    sequences = script("track_sequences")
    folder = sequences.crossing(COCO128, tmp_path / "crossing", 60, seed=1, size=(270, 480))
    truth = read_rows(folder / "gt.txt")
    assert len(list((folder / "frames").glob("*.jpg"))) == 60
    moving = truth[truth[:, 1] < sequences.BACKGROUND_IDS]
    frames_of = {int(track_id): set(moving[moving[:, 1] == track_id, 0].astype(int)) for track_id in set(moving[:, 1])}
    assert len(frames_of) >= 6
    assert any(min(frames) > 1 for frames in frames_of.values())  # one enters after the start
    assert any(max(frames) < 60 for frames in frames_of.values())  # one leaves before the end
    gaps = [track_id for track_id, frames in frames_of.items() if max(frames) - min(frames) + 1 > len(frames)]
    assert gaps  # hidden behind another for some frames, then seen again
    assert (truth[:, 4:6] > 0).all() and (truth[:, 6:] == 1).all()


def test_the_pans_labels_move_with_the_camera(tmp_path):
    sequences = script("track_sequences")
    truth = read_rows(sequences.pan(COCO128, tmp_path / "pan", 3, size=(270, 480)) / "gt.txt")
    first, second = (truth[truth[:, 0] == number] for number in (1, 2))
    shared = sorted(set(first[:, 1]) & set(second[:, 1]))
    assert len(shared) >= 3
    centre = {number: rows[:, 2:4] + rows[:, 4:6] / 2 for number, rows in ((1, first), (2, second))}
    moved = [centre[2][second[:, 1] == track_id][0] - centre[1][first[:, 1] == track_id][0] for track_id in shared]
    assert np.median(np.array(moved)[:, 0]) < 0  # the camera moves right and down: the scene moves left and up


@pytest.mark.parametrize("kind", ["bytetrack", "ocsort", "botsort"])
def test_the_truth_as_detections_scores_near_one(tmp_path, kind):
    sequences, benchmark = script("track_sequences"), script("track_benchmark")
    folder = sequences.crossing(COCO128, tmp_path / "crossing", 40, seed=2, size=(270, 480))
    truth = read_rows(folder / "gt.txt")
    detections = np.column_stack([truth[:, 0], truth[:, 2:4], truth[:, 2:4] + truth[:, 4:6],
                                  np.full(len(truth), 0.9), np.zeros(len(truth))])
    np.savetxt(tmp_path / "detections.txt", detections, fmt="%.4f", delimiter=",")
    result = tmp_path / "result.txt"
    benchmark.track_ours(folder, tmp_path / "detections.txt", kind, result, ("object",))
    scores = benchmark.score(folder / "gt.txt", result)
    assert scores["HOTA"] > 0.85 and scores["MOTA"] > 0.85 and scores["IDF1"] > 0.85
