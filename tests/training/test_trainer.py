"""`python -m detect.train` in one process: the run folder, exact resume, checkpoints, bad input."""

from __future__ import annotations

import csv
import dataclasses
import logging
import math
import random
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

from detect import train, val
from detect.errors import UserError
from detect.training import epoch as train_epoch
from detect.training.distributed import DistContext
from detect.training.epoch import train_one_epoch
from detect.training.hooks import EarlyStopping
from detect.training.phase_times import PhaseTimes
from detect.training.resume import TrainingCheckpoint
from detect.training.run_folder import RunFolder, RunPlace
from detect.training.settings import NEW_RUN, NEWEST_RUN, Resume, TrainSettings
from detect.training.setup import recipe as recipe_module
from detect.training.setup.build import build_run
from detect.training.setup.recipe import precision_request, resolve_run
from tests.training.helpers import tiny_dataset, train_args


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny"))


class Lines(logging.Handler):
    """The messages logged while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def finished_run_lines(data, tmp_path_factory):
    """One 2-epoch run shared by the tests that only read its folder or its lines: the folder, and what it logged."""
    project, lines, logger = tmp_path_factory.mktemp("runs"), Lines(), logging.getLogger("detect")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(lines)
    try:
        assert train.main(train_args(data, project)) == 0
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    return project / "exp", lines.messages


@pytest.fixture(scope="module")
def finished_run(finished_run_lines):
    return finished_run_lines[0]


def test_the_last_lines_say_what_best_pt_scored_what_that_means_and_what_comes_next(finished_run_lines, data):
    run, messages = finished_run_lines
    best = run / "weights" / "best.pt"
    scored, *commands = messages[-1].splitlines()
    assert re.fullmatch(rf"best\.pt scored mAP@0\.5 \d\.\d{{3}} \(mAP@0\.5:0\.95 \d\.\d{{3}}\) on the val split of "
                        rf"{re.escape(str(data))} at 64 px: it .*\. Next:", scored), scored
    assert [command.split("   #")[0].strip() for command in commands] == [
        f"python -m detect.val --weights {best} --data {data}",
        f"python -m detect.predict --weights {best} --source {data.parent / 'images' / 'train'}",
        f"python -m detect.export --weights {best} --include onnx"]
    assert messages[-2] == f"results saved to {run}"


def test_run_folder_holds_config_results_weights_and_plots(finished_run):
    for name in ("config.yaml", "results.csv", "results.png", "labels.png", "train_batch0.jpg",
                 "PR_curve.png", "confusion_matrix.png", "val_predictions.jpg", "weights/last.pt", "weights/best.pt"):
        assert (finished_run / name).is_file(), name
    with open(finished_run / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["epoch"] for row in rows] == ["0", "1"]
    assert all(float(row["train/box_loss"]) > 0 and float(row["train/img_per_s"]) > 0 for row in rows)
    assert all(0 <= float(row["metrics/mAP_0.5:0.95"]) <= float(row["metrics/mAP_0.5"]) <= 1 for row in rows)
    assert float(rows[0]["x/lr0"]) > float(rows[0]["x/lr1"])  # warmup: the bias group falls from 0.1


def test_tensorboard_events_when_tensorboard_is_installed(finished_run):
    pytest.importorskip("tensorboard", reason="tensorboard is optional; without it a run writes no events")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(finished_run)).Reload()
    steps = [event.step for event in events.Scalars("metrics/mAP_0.5")]
    assert steps == [0, 1] and "train/box_loss" in events.Tags()["scalars"]


def test_last_checkpoint_holds_the_run_as_it_ended(finished_run):
    last = TrainingCheckpoint.load(finished_run / "weights" / "last.pt")
    best = TrainingCheckpoint.load(finished_run / "weights" / "best.pt")
    assert last.resumable and not best.resumable
    assert (last.counters.epoch, last.counters.iteration, last.counters.batch) == (2, 4, 0)  # 2 batches an epoch
    with open(finished_run / "results.csv") as handle:
        fitness = [0.1 * float(row["metrics/mAP_0.5"]) + 0.9 * float(row["metrics/mAP_0.5:0.95"])
                   for row in csv.DictReader(handle)]
    assert last.counters.best_fitness == pytest.approx(max(fitness), abs=1e-6)
    assert fitness[last.counters.best_epoch] == max(fitness) and fitness.index(max(fitness)) <= last.counters.best_epoch
    stored = yaml.safe_load((finished_run / "config.yaml").read_text())
    assert last.settings.to_dict() == stored["settings"] and dataclasses.asdict(last.hyp) == stored["hyp"]
    momentum = [state["momentum_buffer"] for state in last.optimizer["state"].values()]
    assert len(momentum) == sum(len(group["params"]) for group in last.optimizer["param_groups"])
    assert any(tensor.abs().sum() > 0 for tensor in momentum)  # SGD steps were taken
    assert last.ema_updates > 0 and last.ema["state_dict"].keys() == last.model["state_dict"].keys()
    # The payload is the one layout every reader takes: written back, it reads the same.
    again = TrainingCheckpoint.from_payload(last.to_payload(), "written back")
    assert again.counters == last.counters and again.settings == last.settings and again.date == last.date


def test_best_weights_validate_at_once_at_the_size_they_were_trained_at(finished_run, data, tmp_path, caplog):
    best = finished_run / "weights" / "best.pt"
    assert TrainingCheckpoint.load(best).ema["trained"] == {"imgsz": 64, "data": str(data)}
    args = ["--weights", str(best), "--data", str(data), "--device", "cpu", "--workers", "0", "--project",
            str(tmp_path), "--no-progress"]  # no --imgsz: best.pt's 64, not 640
    with caplog.at_level(logging.INFO, logger="detect"):
        assert val.main(args) == 0
    assert f"{best} on {data} (val split) at 64 px, the size the model was trained at" in caplog.messages
    assert any(message.startswith(f"{data}, val split: 8 images at 64 px") for message in caplog.messages)


def _final_state(run_dir):
    last = TrainingCheckpoint.load(run_dir / "weights" / "last.pt")
    return last.model["state_dict"], last.ema["state_dict"], last.optimizer


def test_resume_continues_exactly(data, tmp_path, monkeypatch):
    straight = tmp_path / "straight"
    assert train.main(train_args(data, straight)) == 0
    # An interruption right after the first epoch's checkpoint: the run stops as if killed there.
    interrupted = tmp_path / "interrupted"
    with monkeypatch.context() as patch:
        patch.setattr(EarlyStopping, "should_stop", staticmethod(lambda run, epoch: True))
        assert train.main(train_args(data, interrupted)) == 0
    assert TrainingCheckpoint.load(interrupted / "exp" / "weights" / "last.pt").counters.epoch == 1
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
    (["--rect", "--multi-scale"], "do not go together"),
    (["--sync-bn"], "--sync-bn needs GPUs or NPUs"),
    (["--hyp", "MALFORMED"], "not valid yaml: expected ',' or ']', but got '<stream end>' (line 2, column 1)"),
    (["--cfg", "yolov9.yaml"], "yolov9.yaml: no such file"),
    (["--weights", "missing.pt"], "weights not found: missing.pt"),
    (["--weights", "NOT_A_CHECKPOINT"], "not_a_checkpoint.pt"),
    (["--freeze", "999"], "--freeze 999: the model has 25 layers (0-24)"),
    (["--freeze", "3", "25"], "--freeze 3 25: the model has 25 layers"),
    (["--resume", "nowhere/last.pt"], "nowhere/last.pt"),
    (["--data", "NO_IMAGES"], "no images"),
])
def test_bad_input_is_one_line_and_exit_2(data, tmp_path, capsys, flags, message):
    # Each input is checked before the label check and before a run folder is made.
    hyp = tmp_path / "bad_hyp.yaml"
    hyp.write_text("lr_zero: 0.01\n")
    malformed = tmp_path / "malformed.yaml"
    malformed.write_text("lr0: [0.01\n")
    not_a_checkpoint = tmp_path / "not_a_checkpoint.pt"
    not_a_checkpoint.write_text("hello")
    empty = tmp_path / "empty" / "images" / "train"
    empty.mkdir(parents=True)
    no_images = tmp_path / "empty.yaml"
    no_images.write_text(f"path: {empty.parent.parent}\ntrain: images/train\nval: images/train\nnames: [a]\n")
    replace = {"BAD_HYP": hyp, "MALFORMED": malformed, "NOT_A_CHECKPOINT": not_a_checkpoint, "NO_IMAGES": no_images}
    flags = [str(replace.get(flag, flag)) for flag in flags]
    try:
        code = train.main(train_args(data, tmp_path, *flags))
    except SystemExit as stopped:  # a flag out of range stops in argparse, before any work
        code = stopped.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "exp").exists()  # stopped before making a run folder


def test_batch_that_does_not_divide_over_the_ranks(data, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert train.main(train_args(data, tmp_path, "--batch-size", "3")) == 2
    assert "does not divide over 2 ranks" in capsys.readouterr().err


def test_single_class_rect_training(data, tmp_path):
    settings = TrainSettings(cfg="yolov5n.yaml", data=str(data), imgsz=128, batch_size=4, epochs=1, workers=0,
                             device="cpu", project=str(tmp_path / "built"), progress=False, single_cls=True, rect=True)
    batch = next(iter(build_run(resolve_run(settings, DistContext()), PhaseTimes()).train_loader))
    assert batch.images.shape[-2:] == (96, 128)  # the 96x128 images keep their aspect ratio (rect), stride 32
    assert batch.targets[:, 1].eq(0).all() and batch.targets.shape[0] == sum(batch.target_counts)  # one class
    assert train.main(train_args(data, tmp_path, "--single-cls", "--rect", "--noval", epochs=1)) == 0
    model = TrainingCheckpoint.load(tmp_path / "exp" / "weights" / "best.pt").ema
    assert model["names"] == ["item"] and model["state_dict"]["model.24.m.0.bias"].shape[0] == 3 * 6


def test_kill_9_never_leaves_an_unreadable_last_checkpoint(data, tmp_path):
    """Kill the trainer at random moments (saves take a good share of these tiny epochs); last.pt always loads."""
    last = tmp_path / "exp" / "weights" / "last.pt"
    rng = random.Random(0)
    for attempt in range(3):
        args = train_args(data, tmp_path, "--noval", epochs=1000) if attempt == 0 else ["--resume", str(last)]
        process = subprocess.Popen([sys.executable, "-m", "detect.train", *args, "--no-progress"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not last.is_file() or attempt and TrainingCheckpoint.load(last).counters.epoch <= attempt:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "no checkpoint written"
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.5))
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert TrainingCheckpoint.load(last).counters.epoch >= 1


def test_a_resumed_run_clears_a_killed_save(tmp_path):
    settings = TrainSettings(cfg="yolov5n.yaml", project=str(tmp_path))
    leftover = tmp_path / "exp" / "weights" / ".last.pt.k1ll3d.tmp"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half a checkpoint")
    assert RunFolder.open(RunPlace(settings.project, settings.name, exist_ok=True), DistContext()).save_dir == (
        tmp_path / "exp")
    assert not leftover.exists()


def test_resume_is_read_once_into_one_of_three_cases(tmp_path):
    assert Resume.parse(False) == Resume.parse(None) == Resume.parse("") == NEW_RUN and not NEW_RUN.asked
    assert Resume.parse(True) == NEWEST_RUN and NEWEST_RUN.asked and NEWEST_RUN.path is None
    given = Resume.parse(str(tmp_path))
    assert given == Resume(path=tmp_path) and given.asked and not given.newest


def test_non_finite_losses_skip_steps_then_stop_the_run(data, tmp_path, monkeypatch):
    settings = TrainSettings(cfg="yolov5n.yaml", data=str(data), imgsz=64, batch_size=2, epochs=1, workers=0,
                             device="cpu", project=str(tmp_path), progress=False)
    run = build_run(resolve_run(settings, DistContext()), PhaseTimes())
    parts, loss = run.parts, run.parts.criterion
    calls = []

    def nan_on_second_call(raw, targets):
        calls.append(1)
        total, items = loss(raw, targets)
        return (total * math.nan if len(calls) == 2 else total), items

    def one_epoch(criterion):
        return train_one_epoch(dataclasses.replace(parts, criterion=criterion), run.train_loader, run.plan,
                               run.counters, show_progress=False)

    before = [parameter.detach().clone() for parameter in run.model.parameters()]
    stats = one_epoch(nan_on_second_call)
    run.counters.end_epoch()
    assert stats.nonfinite_steps == 1 and run.counters.nonfinite_steps == 1
    assert all(torch.isfinite(parameter).all() for parameter in run.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, run.model.parameters()))
    monkeypatch.setattr(train_epoch, "MAX_NONFINITE_STREAK", 3)
    with pytest.raises(UserError, match="not finite for 3 steps in a row"):
        one_epoch(lambda raw, targets: (loss(raw, targets)[0] * math.nan, torch.zeros(3)))


@pytest.mark.parametrize("device, context, spec", [
    ("npu", DistContext(rank=3, world_size=4, local_rank=1), "npu:1"),  # torchrun: the index is LOCAL_RANK
    ("cuda:0", DistContext(rank=1, world_size=2, local_rank=1), "cuda:1"),
    ("cpu", DistContext(rank=1, world_size=2, local_rank=1), "cpu"),
    ("npu:2", DistContext(), "npu:2"),  # one process: the device as given
])
def test_each_rank_takes_its_local_device_with_the_npu_switches(monkeypatch, device, context, spec):
    calls = []
    monkeypatch.setattr(recipe_module.backends, "select", lambda spec, **options: calls.append((spec, options)))
    settings = TrainSettings(cfg="yolov5n.yaml", device=device, amp=False, npu_allow_hf32=True)
    precision_request(settings, context).backend()
    assert calls == [(spec, {"amp": False, "npu_jit_compile": None, "npu_allow_hf32": True, "nms_device": "device"})]
