"""`python -m detect.train` in one process: the run folder, exact resume, checkpoints, bad input."""

from __future__ import annotations

import csv

import pytest
import torch

from detect import train, val
from detect.engine.checkpoint import load_checkpoint
from detect.engine.trainer import Trainer
from tests.engine.train_helpers import tiny_dataset, train_args


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def finished_run(data, tmp_path_factory):
    """One 2-epoch run shared by the tests that only read its folder."""
    project = tmp_path_factory.mktemp("runs")
    assert train.main(train_args(data, project)) == 0
    return project / "exp"


def test_run_folder_holds_config_results_weights_and_plots(finished_run):
    for name in ("config.yaml", "results.csv", "results.png", "labels.png", "train_batch0.jpg",
                 "PR_curve.png", "confusion_matrix.png", "weights/last.pt", "weights/best.pt"):
        assert (finished_run / name).is_file(), name
    with open(finished_run / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["epoch"] for row in rows] == ["0", "1"]
    assert all(float(row["train/box_loss"]) > 0 and float(row["train/img_per_s"]) > 0 for row in rows)
    assert all(0 <= float(row["metrics/mAP_0.5:0.95"]) <= float(row["metrics/mAP_0.5"]) <= 1 for row in rows)
    assert float(rows[0]["x/lr0"]) > float(rows[0]["x/lr1"])  # warmup: the bias group falls from 0.1


def test_last_checkpoint_holds_everything_resume_needs(finished_run):
    payload = load_checkpoint(finished_run / "weights" / "last.pt")
    assert payload["progress"]["epoch"] == 2 and payload["progress"]["iteration"] == 4
    for key in ("model", "ema", "optimizer", "scaler", "scheduler", "rng", "config"):
        assert payload[key] is not None, key
    assert payload["config"]["settings"]["epochs"] == 2
    assert load_checkpoint(finished_run / "weights" / "best.pt")["optimizer"] is None


def test_best_weights_validate_at_once(finished_run, data, tmp_path):
    args = ["--weights", str(finished_run / "weights" / "best.pt"), "--data", str(data), "--imgsz", "64",
            "--device", "cpu", "--workers", "0", "--project", str(tmp_path), "--no-progress"]
    assert val.main(args) == 0


def _final_state(run_dir):
    payload = load_checkpoint(run_dir / "weights" / "last.pt")
    return payload["model"]["state_dict"], payload["ema"]["state_dict"], payload["optimizer"]


def test_resume_continues_exactly(data, tmp_path, monkeypatch):
    straight = tmp_path / "straight"
    assert train.main(train_args(data, straight)) == 0
    # An interruption right after the first epoch's checkpoint: the run stops as if killed there.
    interrupted = tmp_path / "interrupted"
    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "should_stop", lambda self, epoch: True)
        assert train.main(train_args(data, interrupted)) == 0
    assert load_checkpoint(interrupted / "exp" / "weights" / "last.pt")["progress"]["epoch"] == 1
    assert train.main(["--resume", str(interrupted / "exp" / "weights" / "last.pt"), "--no-progress"]) == 0
    expected, resumed = _final_state(straight / "exp"), _final_state(interrupted / "exp")
    for name, tensor in expected[0].items():
        assert torch.equal(tensor, resumed[0][name]), name
    for name, tensor in expected[1].items():
        assert torch.equal(tensor, resumed[1][name]), f"ema {name}"
    momentum = [state["momentum_buffer"] for state in expected[2]["state"].values()]
    assert all(torch.equal(a, b["momentum_buffer"]) for a, b in zip(momentum, resumed[2]["state"].values()))


def test_resume_of_a_finished_run_is_refused(finished_run, capsys):
    assert train.main(["--resume", str(finished_run / "weights" / "last.pt")]) == 2
    assert "already finished" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--data", "missing.yaml"], "missing.yaml"),
    (["--device", "tpu"], "device 'tpu'"),
    (["--epochs", "0"], "--epochs"),
    (["--batch-size", "0"], "--batch-size"),
    (["--hyp", "BAD_HYP"], "unknown key 'lr_zero'"),
])
def test_bad_input_is_one_line_and_exit_2(data, tmp_path, capsys, flags, message):
    hyp = tmp_path / "bad_hyp.yaml"
    hyp.write_text("lr_zero: 0.01\n")
    flags = [str(hyp) if flag == "BAD_HYP" else flag for flag in flags]
    assert train.main(train_args(data, tmp_path, *flags)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_batch_that_does_not_divide_over_the_ranks(data, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert train.main(train_args(data, tmp_path, "--batch-size", "3")) == 2
    assert "does not divide over 2 ranks" in capsys.readouterr().err
