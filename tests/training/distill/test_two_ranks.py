"""Training with a teacher at 2 ranks under torchrun (gloo on the CPU): each rank holds its teacher outside DDP, the
projectors start as the main rank's and their gradients are averaged, so that the ranks end with the same student
and the same projectors; last.pt keeps them, results.csv the term."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from detect.training.resume import TrainingCheckpoint
from tests.training.distill.test_training import save_teacher
from tests.training.helpers import tiny_dataset, train_args

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]


def test_two_ranks_train_with_a_teacher_and_end_with_the_same_student_and_projectors(tmp_path):
    data = tiny_dataset(tmp_path / "data")
    teacher = save_teacher(tmp_path / "teacher.pt")
    # 3 epochs of 2 steps a rank: accumulation reaches 2 batches at the fifth (yolov5's warmup ramp to 64 / 4), so
    # one step accumulates without DDP's all-reduce, and the projectors' gradients wait with the student's
    flags = train_args(data, tmp_path / "runs", "--noval", "--noplots", "--teacher", str(teacher), "--distill", "both",
                       epochs=3)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "detect.train", *flags]
    finished = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
                              cwd=REPO, check=False,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)})
    output = finished.stdout
    assert finished.returncode == 0, output[-5000:]
    # the replicas' check covers the projectors: initialised apart (each rank seeds its own), trained outside DDP
    assert "all 2 ranks hold identical parameters" in output
    assert output.count("distillation: the feature and logit terms from the teacher") == 1  # the main rank speaks
    last = TrainingCheckpoint.load(tmp_path / "runs" / "exp" / "weights" / "last.pt")
    assert sorted(last.distill["projectors"]) == ["0.weight", "1.weight", "2.weight"]
    with open(tmp_path / "runs" / "exp" / "results.csv") as handle:
        assert all(float(row["train/distill_loss"]) > 0 for row in csv.DictReader(handle))
