"""--task study's library part: each checkpoint scored at each size, one study txt each in yolov5's columns (and the
size), and one plot."""

from __future__ import annotations

import numpy as np
import pytest

from detect import backend as backends
from detect.errors import UserError
from detect.evaluation.evaluator import CocoEvaluator
from detect.evaluation.size_study import COLUMNS, STUDY_SIZES, run_study, study_file_name
from detect.evaluation.val_loop import PassOptions, evaluate
from tests.evaluation.test_evaluator import tiny_dataset
from tests.evaluation.test_val_loop import NAMES, batch, decoded_rows, fixed_outputs


def fake_score(calls: list):
    """`score(weights, imgsz)`: 'good.pt' finds image 1's boxes exactly, 'none.pt' finds nothing."""
    def score(weights: str, imgsz: int):
        calls.append((weights, imgsz))
        rows = decoded_rows() if weights.endswith("good.pt") else decoded_rows() * 0
        return evaluate(fixed_outputs(rows), [batch(False)], backends.select("cpu"),
                        CocoEvaluator.from_records(tiny_dataset(), NAMES), options=PassOptions(progress=False))
    return score


def test_study_writes_one_txt_per_weights_and_the_plot(tmp_path):
    calls = []
    files = run_study(fake_score(calls), ["runs/a/good.pt", "none.pt"], "data/coco128.yaml", tmp_path, sizes=(64, 96))
    assert calls == [("runs/a/good.pt", 64), ("runs/a/good.pt", 96), ("none.pt", 64), ("none.pt", 96)]
    assert [file.name for file in files] == ["study_coco128_good.txt", "study_coco128_none.txt"]
    good, none = (np.loadtxt(file, ndmin=2) for file in files)
    assert good.shape == (2, len(COLUMNS)) and COLUMNS[3] == "mAP50-95" and COLUMNS[10] == "imgsz"
    assert good[:, 10].tolist() == [64, 96] and np.all(good[:, 4:7] == 0)  # sizes; no val loss standalone
    assert 0.3 < good[0, 3] < 1 and good[0, 2] >= good[0, 3] and np.all(none[:, 3] <= 0)
    assert np.all(good[:, 7:10] >= 0)  # the three times, ms per image
    assert files[0].read_text().startswith("# P R mAP50 mAP50-95")
    assert (tmp_path / "study.png").stat().st_size > 10_000


def test_two_weights_with_one_stem_are_refused_before_any_scoring(tmp_path):
    calls = []
    with pytest.raises(UserError, match="two --weights have one file stem"):
        run_study(fake_score(calls), ["a/best.pt", "b/best.pt"], "coco128.yaml", tmp_path, sizes=(64,))
    assert calls == []


def test_yolov5s_sizes_and_file_names():
    assert STUDY_SIZES == (256, 384, 512, 640, 768, 896, 1024, 1152, 1280, 1408, 1536)
    assert study_file_name("../data/coco.yaml", "weights/yolov5n.pt") == "study_coco_yolov5n.txt"
