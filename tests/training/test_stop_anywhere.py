"""SIGTERM wherever it lands ends the run within 5 s with last.pt ready to resume: in a validation (and a resume then
validates that epoch: bit-identical to the run that never stopped), in the final evaluation, in the label check (its
process pool leaves nothing behind) and in a save; on every rank under torchrun, whose --max-restarts does not start
the job again."""

from __future__ import annotations

import csv
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from detect import train
from detect.training import hooks
from detect.training.resume import TrainingCheckpoint
from tests.training.helpers import tagged_processes, tiny_dataset, train_args

REPO = Path(__file__).resolve().parents[2]
HARNESS = Path(__file__).with_name("slowed_train.py")
BATCHES = 4  # 16 images at batch 4
STOP_WITHIN_S = 5.0


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny16"), count=16)


def _stop_in_validation(monkeypatch, epoch: int) -> None:
    """A stop asked after the last step of `epoch` (from 0), as if SIGTERM came just then: it lands in the epoch's
    validation."""

    def after_step(self, run, index, step) -> None:
        if run.counters.epoch == epoch and index + 1 == BATCHES:
            run.control.stop_signal = signal.SIGTERM

    monkeypatch.setattr(hooks.SignalStop, "after_step", after_step, raising=False)


def _state(run_dir: Path):
    last = TrainingCheckpoint.load(run_dir / "weights" / "last.pt")
    return last.model["state_dict"], last.ema["state_dict"], last.optimizer["state"]


def _metric_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "results.csv") as handle:
        return [{key: value for key, value in row.items() if "metrics/" in key or "loss" in key or key == "epoch"}
                for row in csv.DictReader(handle)]


def test_a_stop_in_validation_resumes_to_validate_that_epoch_bit_identical(data, tmp_path, monkeypatch, capsys):
    straight = tmp_path / "straight"
    assert train.main(train_args(data, straight, epochs=3)) == 0
    stopped = tmp_path / "stopped"
    with monkeypatch.context() as patch:
        _stop_in_validation(patch, epoch=1)
        assert train.main(train_args(data, stopped, epochs=3)) == 143
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == f"stopped in epoch 2's validation; resume with: python -m detect.train --resume {stopped / 'exp'}"
    counters = TrainingCheckpoint.load(stopped / "exp" / "weights" / "last.pt").counters
    assert (counters.epoch, counters.batch) == (1, BATCHES)  # trained through, not yet validated
    assert train.main([*shlex.split(line.split("resume with: ", 1)[1])[3:], "--no-progress"]) == 0
    for expected, resumed in zip(_state(straight / "exp"), _state(stopped / "exp")):
        for name, tensor in expected.items():
            if isinstance(tensor, dict):  # optimizer state: momentum buffers
                assert torch.equal(tensor["momentum_buffer"], resumed[name]["momentum_buffer"]), name
            else:
                assert torch.equal(tensor, resumed[name]), name
    assert _metric_rows(stopped / "exp") == _metric_rows(straight / "exp")  # epoch 2 validated once, after the resume


def test_a_stop_in_the_final_evaluation_says_how_to_score_the_saved_weights(data, tmp_path, monkeypatch, capsys):
    def stop_at_the_end(self, run, epoch, row) -> None:
        if epoch + 1 == run.settings.epochs:
            run.control.stop_signal = signal.SIGTERM

    monkeypatch.setattr(hooks.SignalStop, "after_epoch", stop_at_the_end, raising=False)
    assert train.main(train_args(data, tmp_path, epochs=1)) == 143
    best = tmp_path / "exp" / "weights" / "best.pt"
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"stopped in the final evaluation; the 1 epochs are trained and saved: score them with python -m detect.val "
        f"--weights {best} --data {data} --imgsz 64")
    assert TrainingCheckpoint.load(tmp_path / "exp" / "weights" / "last.pt").counters.epoch == 1


def test_a_stop_at_an_epoch_s_end_stops_there_with_that_epoch_s_last_pt_also_with_nosave(data, tmp_path, monkeypatch,
                                                                                           capsys):
    def stop_at_the_first_epoch_s_end(self, run, epoch, row) -> None:
        if epoch == 0:
            run.control.stop_signal = signal.SIGTERM

    monkeypatch.setattr(hooks.SignalStop, "after_epoch", stop_at_the_first_epoch_s_end, raising=False)
    assert train.main(train_args(data, tmp_path, "--nosave", epochs=3)) == 143
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"stopped after epoch 1; resume with: python -m detect.train --resume {tmp_path / 'exp'}")
    counters = TrainingCheckpoint.load(tmp_path / "exp" / "weights" / "last.pt").counters
    assert (counters.epoch, counters.batch) == (1, 0)  # written though --nosave writes only the last epoch's


@pytest.fixture
def job():
    """A tag for the processes a test starts (DETECT_TEST_JOB in their environment); any left at its end are killed,
    so that a failed check leaves nothing running."""
    tag = uuid.uuid4().hex
    yield tag
    for pid in tagged_processes(tag):
        os.kill(pid, signal.SIGKILL)


def _start(command: list[str], tmp_path: Path, job: str, stage: str, **environ: str) -> tuple[subprocess.Popen, Path]:
    """`command`, tagged `job`, with `stage` slowed (slowed_train.py); the process and the marker the stage creates."""
    marker = tmp_path / "marker"
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "SLOWED": stage,
               "MARKER": str(marker), "DETECT_TEST_JOB": job, "PYTHONPATH": str(REPO), **environ}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ,
                               cwd=REPO, start_new_session=True)
    return process, marker


def _wait(path: Path, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _stop(process: subprocess.Popen, job: str, whole_job: bool,
          sent_signal: signal.Signals = signal.SIGTERM) -> tuple[str, float]:
    """SIGTERM (or `sent_signal`) to the process, or to every process of the job (torchrun, its workers, theirs: a
    scheduler's SIGTERM, a terminal's Ctrl-C); the output and how long the process took to end."""
    sent = time.monotonic()
    for pid in tagged_processes(job) if whole_job else [process.pid]:
        os.kill(pid, sent_signal)
    output = process.communicate(timeout=120)[0]
    return output, time.monotonic() - sent


# Each slowed call: a validation batch, a label-check image (the check's chunk of 16 images is 1.6 s), a save.
@pytest.mark.parametrize("stage, seconds, extra, expected", [
    ("validation", "2", (), "stopped in epoch 1's validation; resume with: "),
    ("save", "0.5", ("--noval",), "stopped after epoch 1; resume with: "),  # the epoch's last.pt: none after it
    ("check", "0.1", (), "SIGTERM during the run's set-up: stopped before the first step (nothing saved)"),
])
def test_sigterm_ends_one_process_within_5_s_wherever_it_lands(data, tmp_path, job, stage, seconds, extra,
                                                                 expected):
    if stage == "check":  # a dataset of its own: the module's has its label cache
        data = tiny_dataset(tmp_path / "unchecked", count=16)
    args = train_args(data, tmp_path / "runs", "--workers", "2", *extra, epochs=3)
    process, marker = _start([sys.executable, str(HARNESS), *args], tmp_path, job, stage, SLOWED_SECONDS=seconds)
    _wait(marker, process)
    time.sleep(0.3)
    output, seconds = _stop(process, job, whole_job=stage == "check")  # the check's pool gets the signal too
    assert process.returncode == 143, output[-3000:]
    assert seconds < STOP_WITHIN_S, (seconds, output[-3000:])
    assert "Traceback" not in output, output[-3000:]
    assert output.strip().splitlines()[-1].startswith(expected), output[-3000:]
    time.sleep(1.0)
    assert tagged_processes(job) == [], "loader workers or label-check processes outlived the run"
    last = tmp_path / "runs" / "exp" / "weights" / "last.pt"
    if stage != "check":
        assert TrainingCheckpoint.load(last).resumable


@pytest.mark.slow
@pytest.mark.parametrize("sent_signal, whole_job", [
    (signal.SIGTERM, True),  # a scheduler (Slurm) signals every process of the job
    (signal.SIGINT, False),  # a terminal's Ctrl-C reaches torchrun alone (its ranks have sessions of their own)
])
def test_a_signal_to_a_torchrun_job_in_validation_ends_every_rank_once_and_no_restart(data, tmp_path, job, sent_signal,
                                                                                         whole_job):
    args = train_args(data, tmp_path / "runs", "--workers", "1", epochs=3)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "--max_restarts", "1", str(HARNESS), *args]
    process, marker = _start(command, tmp_path, job, "validation", SLOWED_SECONDS="2")
    _wait(marker, process)
    time.sleep(0.3)
    output, seconds = _stop(process, job, whole_job=whole_job, sent_signal=sent_signal)
    assert seconds < STOP_WITHIN_S + 2, (seconds, output[-3000:])  # torchrun itself ends a moment after its ranks
    assert process.returncode != 0 and "resuming from" not in output, output[-3000:]  # no restart
    resume_lines = [line for line in output.splitlines() if "resume with:" in line]
    expected = f"stopped in epoch 1's validation; resume with: python -m detect.train --resume {tmp_path / 'runs/exp'}"
    assert resume_lines == [expected], output[-3000:]
    counters = TrainingCheckpoint.load(tmp_path / "runs" / "exp" / "weights" / "last.pt").counters
    assert (counters.epoch, counters.batch) == (0, BATCHES)  # trained through epoch 1, not validated
    time.sleep(1.0)
    assert tagged_processes(job) == []


@pytest.mark.slow
def test_sigterm_to_a_torchrun_job_in_its_epoch_end_save_stops_every_rank_after_that_epoch(data, tmp_path, job):
    """Between the epoch's last validation batch and its next epoch: the ranks agree at the epoch's end and stop
    there, last.pt being the epoch's own (no next epoch started, no second save)."""
    args = train_args(data, tmp_path / "runs", "--workers", "1", "--noval", epochs=3)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "--max_restarts", "1", str(HARNESS), *args]
    process, marker = _start(command, tmp_path, job, "save", SLOWED_SECONDS="1")
    _wait(marker, process)
    time.sleep(0.3)
    output, seconds = _stop(process, job, whole_job=True)
    assert seconds < STOP_WITHIN_S + 2, (seconds, output[-3000:])  # torchrun itself ends a moment after its ranks
    assert process.returncode != 0 and "resuming from" not in output, output[-3000:]
    expected = f"stopped after epoch 1; resume with: python -m detect.train --resume {tmp_path / 'runs/exp'}"
    assert [line for line in output.splitlines() if "resume with:" in line] == [expected], output[-3000:]
    counters = TrainingCheckpoint.load(tmp_path / "runs" / "exp" / "weights" / "last.pt").counters
    assert (counters.epoch, counters.batch) == (1, 0)
    time.sleep(1.0)
    assert tagged_processes(job) == []
