"""Training on a split with images of hostile sizes (a 30000x30000 PNG of 0.9 MB, 20000x10 and 10x20000 images) and
2,000 classes: the pixel bomb is counted and named by the label check from its header, the thin images train,
validate and are drawn, the confusion matrix shows the classes seen; in one process and at 2 ranks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data.helpers import write_flat_png, write_sample, write_yaml
from tests.training.helpers import tiny_dataset, train_args
from tests.user_run import run_cli

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
CLASSES = 2_000  # more than a confusion matrix plots (100): it shows the most counted


def hostile_split(root: Path) -> Path:
    tiny_dataset(root, count=4)
    write_sample(root, "train", "wide", 10, 20000, [(100, 0, 5000, 10)], [1])
    write_sample(root, "train", "tall", 20000, 10, [(0, 100, 10, 5000)], [2])
    write_flat_png(root / "images" / "train" / "bomb.png", 30000, 30000)
    (root / "labels" / "train" / "bomb.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    return write_yaml(root, names=tuple(f"class{index}" for index in range(CLASSES)))


def check_run(output: str, run: Path) -> None:
    bomb = run.parent.parent / "data" / "images" / "train" / "bomb.png"
    assert "Traceback" not in output and output.count("image too large") == 2, output[-3000:]  # train and val
    assert str(bomb) in (run.parent.parent / "data" / "labels" / "train.detect.problems.txt").read_text()
    assert "(6 images)" in output  # the final evaluation: the four small images and the thin ones
    assert {"confusion_matrix.png", "val_predictions.jpg", "labels.png"} <= {path.name for path in run.iterdir()}


def test_one_process_skips_the_bomb_by_name_and_trains_on_the_rest(tmp_path):
    data = hostile_split(tmp_path / "data")
    result = run_cli("detect.train", *train_args(data, tmp_path / "runs", "--batch-size", "2", epochs=1), memory_gb=3,
                     timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    check_run(result.stderr, tmp_path / "runs" / "exp")


def test_two_ranks_skip_the_bomb_by_name_and_train_on_the_rest(tmp_path):
    data = hostile_split(tmp_path / "data")
    launcher = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "detect.train",
         *train_args(data, tmp_path / "runs", "--batch-size", "2", "--max-pixels", "20000000", epochs=1)],
        capture_output=True, text=True, timeout=300, cwd=REPO, check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    output = launcher.stdout + launcher.stderr
    assert launcher.returncode == 0, output[-3000:]
    assert "more than the limit of 20,000,000 (--max-pixels)" in (tmp_path / "data" / "labels" /
                                                                   "train.detect.problems.txt").read_text()
    check_run(output, tmp_path / "runs" / "exp")
