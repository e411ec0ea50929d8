"""Issue 43, item 6, run as a user runs train: a hyp value that is NaN, inf or outside its key's range is refused at
load in one line naming the file, the key and the value: from --hyp, --evolve's start hyp, and a checkpoint's stored
hyp on --resume."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from detect.models.safe_io import load_checkpoint, save_checkpoint
from tests.hostile import assert_refused, tree
from tests.training.helpers import tiny_dataset, train_args
from tests.training.test_checkpoint_format import OLD_LAST
from tests.user_run import REPO, run_cli


@pytest.mark.parametrize("evolve", [[], ["--evolve", "2"]])
def test_a_nan_learning_rate_is_refused_before_anything_is_written(tmp_path, evolve):
    data = tiny_dataset(tmp_path / "set", count=4)
    hyp = tmp_path / "nan.yaml"
    hyp.write_text("lr0: .nan\n")  # case 13: it was taken, and training diverged ten steps later
    before = tree(tmp_path)
    done = run_cli("detect.train", *train_args(data, Path("runs"), "--hyp", str(hyp), *evolve), cwd=tmp_path)
    assert_refused(done, f"{hyp}: key 'lr0' must be a finite number > 0, got nan")
    assert tree(tmp_path) == before


def test_a_stored_hyp_out_of_range_is_not_resumed(tmp_path):
    payload = load_checkpoint(OLD_LAST)
    payload["config"]["hyp"]["momentum"] = math.inf
    last = save_checkpoint(tmp_path / "runs" / "exp" / "weights" / "last.pt", payload)
    before = tree(tmp_path)
    done = run_cli("detect.train", "--resume", str(last), cwd=tmp_path)
    assert_refused(done, f"{last} (stored hyp): key 'momentum' must be a number in [0, 1), got inf")
    assert tree(tmp_path) == before


@pytest.mark.slow
def test_two_ranks_refuse_a_diverged_resume_alike(tmp_path):
    """Under torchrun every rank reads the same answer (resume_point) and stops on the same line; nothing hangs."""
    payload = load_checkpoint(OLD_LAST)
    payload["model"]["state_dict"]["model.0.bn.running_var"].fill_(math.nan)
    last = save_checkpoint(tmp_path / "runs" / "exp" / "weights" / "last.pt", payload)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "detect.train", "--resume", str(last)]
    done = subprocess.run(command, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300, check=False)
    line = f"error: {last}: 1 of "
    assert done.returncode != 0 and done.stderr.count(line) == 2, done.stderr[-3000:]  # rank 0 and rank 1
    assert f'File "{REPO / "detect"}' not in done.stderr  # torchrun's own ChildFailedError shows no frame of ours
