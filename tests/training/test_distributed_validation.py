"""Validation spread over ranks: each of 2 gloo ranks predicts its whole batches of coco128's val split, the main
rank scores them all once; the metrics and the plots equal a one-process evaluation of the same weights."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.shared_data import COCO128, YOLOV5N, needs_shared

REPO = Path(__file__).resolve().parents[2]
WORKER = str(Path(__file__).with_name("distributed_eval_worker.py"))

pytestmark = [pytest.mark.slow, needs_shared]


def _evaluate(out: Path, ranks: int) -> dict:
    """The worker alone (one process) or under torchrun with `ranks` ranks; its metrics.json."""
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)] if ranks > 1 else []
    # 128 images at batch 12: 11 batches, the last one partial, so rank 0 takes 6 and rank 1 takes 5.
    command = [sys.executable, *launcher, WORKER, str(YOLOV5N), str(COCO128 / "coco128.yaml"), "160", "12", str(out)]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    finished = subprocess.run(command, check=False, capture_output=True, text=True, env=environment, cwd=REPO, timeout=600)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    return json.loads((out / "metrics.json").read_text())


def _equal(a, b) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return math.isnan(a) and math.isnan(b) or abs(a - b) <= 1e-6
    return a == b


def test_two_ranks_score_as_one_process(tmp_path):
    one, two = _evaluate(tmp_path / "one", 1), _evaluate(tmp_path / "two", 2)
    assert one["map50_95"] > 0.1  # a real model on real images
    assert one.keys() == two.keys()
    for key in one:
        assert _equal(one[key], two[key]), key
    for plot in ("PR_curve.png", "confusion_matrix.png", "val_predictions.jpg"):
        first, second = cv2.imread(str(tmp_path / "one" / plot)), cv2.imread(str(tmp_path / "two" / plot))
        assert first is not None and np.array_equal(first, second), plot
