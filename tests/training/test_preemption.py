"""Stopping inside an epoch: SIGTERM and Ctrl-C stop at a step boundary with last.pt and one line; --save-minutes
saves inside the epoch; a run resumed from such a checkpoint ends bit-identical to the one that never stopped."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time

import pytest
import torch

from detect import train
from detect.training import hooks
from detect.training.resume import TrainingCheckpoint
from tests.training.helpers import tiny_dataset, train_args

BATCHES = 4  # 16 images at batch 4


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny16"), count=16)


def _stop_from_step(monkeypatch, first_step: int) -> None:
    """The run's `first_step`-th step (counted from 1 over the run) starts with a stop asked, as if SIGTERM had come
    just before it."""
    steps = []

    def before_step(self, run, index, batch) -> None:
        steps.append(index)
        if len(steps) >= first_step:
            run.control.stop_signal = signal.SIGTERM

    monkeypatch.setattr(hooks.SignalStop, "before_step", before_step)


def _weights(run_dir):
    last = TrainingCheckpoint.load(run_dir / "weights" / "last.pt")
    return last.model["state_dict"], last.ema["state_dict"], last.optimizer["state"]


@pytest.mark.parametrize("stop_at_step", [6, 8])  # inside epoch 2, and at its last batch
def test_resume_inside_an_epoch_is_bit_identical(data, tmp_path, monkeypatch, capsys, stop_at_step):
    straight = tmp_path / "straight"
    assert train.main(train_args(data, straight, "--noval", epochs=3)) == 0
    stopped = tmp_path / "stopped"
    with monkeypatch.context() as patch:
        _stop_from_step(patch, stop_at_step)
        assert train.main(train_args(data, stopped, "--noval", epochs=3)) == 143
    line = capsys.readouterr().err.strip().splitlines()[-1]
    counters = TrainingCheckpoint.load(stopped / "exp" / "weights" / "last.pt").counters
    assert counters.epoch == 1 and 0 < counters.batch <= BATCHES
    assert line == (f"stopped at epoch 2, batch {counters.batch}/{BATCHES}; resume with: python -m detect.train "
                    f"--resume {stopped / 'exp'}")
    printed = shlex.split(line.split("resume with: ", 1)[1])
    assert printed[:3] == ["python", "-m", "detect.train"]
    assert train.main([*printed[3:], "--no-progress"]) == 0  # the printed command itself: --resume <run folder>
    for expected, resumed in zip(_weights(straight / "exp"), _weights(stopped / "exp")):
        for name, tensor in expected.items():
            if isinstance(tensor, dict):  # optimizer state: momentum buffers
                assert torch.equal(tensor["momentum_buffer"], resumed[name]["momentum_buffer"]), name
            else:
                assert torch.equal(tensor, resumed[name]), name


def test_save_minutes_writes_last_pt_inside_the_epoch(data, tmp_path, monkeypatch):
    saved = []
    original = hooks.Checkpointer.after_step

    def record(self, run, index, step):
        if step.save_now:
            saved.append(run.counters.batch)
        original(self, run, index, step)

    def always_due(self, run, index, batch):
        run.control.save_asked = True

    monkeypatch.setattr(hooks.Checkpointer, "after_step", record)
    monkeypatch.setattr(hooks.TimedSave, "before_step", always_due)
    assert train.main(train_args(data, tmp_path, "--noval", "--save-minutes", "5", epochs=1)) == 0
    assert saved and all(0 < batch <= BATCHES for batch in saved), saved
    assert TrainingCheckpoint.load(tmp_path / "exp" / "weights" / "last.pt").counters.batch == 0  # the epoch's end


@pytest.mark.parametrize("sent, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_every_rank_at_a_boundary_with_last_pt_and_one_line(data, tmp_path, sent, code):
    args = train_args(data, tmp_path, "--noval", "--workers", "2", epochs=1000)
    process = subprocess.Popen([sys.executable, "-m", "detect.train", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    started = tmp_path / "exp" / "train_batch0.jpg"  # the first epoch is under way
    deadline = time.monotonic() + 120
    while not started.is_file():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
        time.sleep(0.05)
    time.sleep(1.0)
    sent_at = time.monotonic()
    process.send_signal(sent)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert time.monotonic() - sent_at < 10
    assert "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    assert line.endswith(f"resume with: python -m detect.train --resume {tmp_path / 'exp'}"), err
    counters = TrainingCheckpoint.load(tmp_path / "exp" / "weights" / "last.pt").counters
    if counters.batch == 0:  # the signal came in the epoch's end (its save): the run stops there
        assert line.startswith(f"stopped after epoch {counters.epoch}; "), err
    else:
        assert line.startswith(f"stopped at epoch {counters.epoch + 1}, batch {counters.batch}/{BATCHES}; "), err


def test_a_second_ctrl_c_ends_at_once_and_leaves_last_pt_whole(data, tmp_path):
    args = train_args(data, tmp_path, "--noval", epochs=1000)
    process = subprocess.Popen([sys.executable, "-m", "detect.train", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    last = tmp_path / "exp" / "weights" / "last.pt"
    deadline = time.monotonic() + 120
    while not last.is_file():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    time.sleep(0.2)  # two signals at once would reach Python's handler as one
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    # 130, or ended by the signal itself when it came in the interpreter's last moments (Python has put the default
    # action back by then): a shell shows 130 for both
    assert process.returncode in (130, -signal.SIGINT), err
    assert "Traceback" not in err, err
    assert TrainingCheckpoint.load(last).counters.epoch >= 1


def test_resume_from_a_folder_without_a_checkpoint_is_one_line(tmp_path, capsys):
    assert train.main(["--resume", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: --resume {tmp_path}: a folder without weights/last.pt; give a run "
                                       "folder or a last.pt\n")
