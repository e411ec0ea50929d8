"""Tiled training from the command line, in one process and as 2 ranks under torchrun (gloo on the CPU): the windows
are the samples, each rank takes its share of them, and the run is scored by sliced inference on the images."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data.helpers import write_sample, write_yaml
from tests.training.helpers import train_args

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def tiled_dataset(root: Path) -> Path:
    """8 images of 160x224 with three 8-20 px boxes each, some across the 64 px windows' seams."""
    for index in range(8):
        boxes = [(10 + index, 12, 30 + index, 28), (58, 40 + index, 72, 52 + index), (150, 120, 170, 140)]
        write_sample(root, "train", f"{index:03d}", 160, 224, boxes)
    return write_yaml(root, tile={"size": 64, "overlap": 0.25, "empty_rate": 0.5})


@pytest.mark.parametrize("ranks", [1, 2])
def test_tiled_training_runs_on_one_process_and_two_ranks(tmp_path, ranks):
    data = tiled_dataset(tmp_path / "data")
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"] if ranks > 1 else ["-m"]
    module = [str(REPO / "detect" / "train.py")] if ranks > 1 else ["detect.train"]
    command = [sys.executable, *launcher, *module, *train_args(data, tmp_path / "runs", "--batch-size", "8",
                                                               epochs=1)]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, env=environ, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "tiles: " in output and "windows of 8 images (64 px, overlap 0.25)" in output
    with open(tmp_path / "runs" / "exp" / "results.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 1
    assert "(8 images)" in output  # the final evaluation: sliced over the 8 images, not their windows
