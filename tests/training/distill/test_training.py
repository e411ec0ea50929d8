"""Training with a teacher, end to end (python -m detect.train --teacher): the log's lines and column, the term off for
the hyp's last epochs, the projectors and the teacher's hash in last.pt alone, best.pt and the export the layout of a
run without a teacher; a teacher that does not fit, or has changed on resume, is one line; a resumed run is
bit-identical; AMP with tiles, and --evolve, with a teacher."""

from __future__ import annotations

import csv
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import torch
import yaml

from detect import export, train
from detect.config import CONFIGS_DIR
from detect.models import build_model
from detect.models.safe_io import load_checkpoint, save_checkpoint
from detect.models.weights import weights_payload
from detect.training import hooks
from detect.training.distill.teacher import file_sha256
from detect.training.resume import TrainingCheckpoint
from tests.shared_data import YOLOV5N, needs_shared
from tests.training.helpers import tiny_dataset, train_args

pytestmark = pytest.mark.slow
NAMES = ["a", "b", "c"]  # tiny_dataset's classes
REPO = Path(__file__).resolve().parents[3]


def save_teacher(path, cfg: str = "yolov5s.yaml", names: list[str] = NAMES, seed: int = 0):
    """A teacher file of ours: `cfg` for `names`, its weights drawn from `seed` (a trained teacher is not needed for
    what these tests check)."""
    torch.manual_seed(seed)
    save_checkpoint(path, weights_payload(build_model(cfg, num_classes=len(names), names=list(names))))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The tiny data, a yolov5s teacher, a hyp that turns the term off for the last half of the epochs, and a run
    without a teacher to compare with."""
    root = tmp_path_factory.mktemp("distill")
    data = tiny_dataset(root / "data")
    (root / "half.yaml").write_text("distill: 0.5\ndistill_off: 0.5\n")
    plain = root / "plain"
    assert train.main(train_args(data, plain, "--noval", "--noplots")) == 0
    return {"root": root, "data": data, "teacher": save_teacher(root / "teacher.pt"), "plain": plain / "exp"}


@pytest.fixture(scope="module")
def taught(setup, tmp_path_factory):
    """A run with the teacher, 2 epochs, the term on in the first only (the hyp's distill_off 0.5), and its log."""
    project = tmp_path_factory.mktemp("taught")
    flags = train_args(setup["data"], project, "--noval", "--noplots", "--teacher", str(setup["teacher"]), "--hyp",
                       str(setup["root"] / "half.yaml"))
    finished = subprocess.run([sys.executable, "-m", "detect.train", *flags], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=600, check=False,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    assert finished.returncode == 0, finished.stdout[-3000:]
    return project / "exp", finished.stdout


def test_the_log_shows_the_term_its_schedule_and_the_teacher_s_cost(setup, taught):
    run, log = taught
    assert (f"distillation: the feature term from the teacher {setup['teacher']} (sha256 "
            f"{file_sha256(setup['teacher'])[:12]}") in log
    assert "gain 0.5, off for the last 1 of 2 epochs" in log
    assert "distillation's cost: " in log and " img/s with the teacher, " in log and "x the step's time" in log
    epoch_lines = [line for line in log.splitlines() if line.startswith("epoch ")]
    assert " distill " in epoch_lines[0] and " distill " not in epoch_lines[1]
    with open(run / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert float(rows[0]["train/distill_loss"]) > 0 and rows[1]["train/distill_loss"] == ""
    assert list(rows[0])[-1] == "train/distill_loss"  # yolov5's columns keep their places


def test_last_pt_alone_holds_the_projectors_and_best_pt_is_a_plain_student(setup, taught):
    run, _ = taught
    last = TrainingCheckpoint.load(run / "weights" / "last.pt")
    assert last.distill["teacher_sha256"] == file_sha256(setup["teacher"])
    shapes = {name: tuple(tensor.shape) for name, tensor in last.distill["projectors"].items()}
    assert shapes == {"0.weight": (128, 64, 1, 1), "1.weight": (256, 128, 1, 1), "2.weight": (512, 256, 1, 1)}
    best, plain = load_checkpoint(run / "weights" / "best.pt"), load_checkpoint(setup["plain"] / "weights" / "best.pt")
    assert "distill" not in best and best.keys() == plain.keys()
    for key in ("model", "ema"):
        ours, theirs = best[key]["state_dict"], plain[key]["state_dict"]
        assert {name: tensor.shape for name, tensor in ours.items()} == {n: t.shape for n, t in theirs.items()}
        assert best[key]["config"] == plain[key]["config"]


def _layout(path):
    graph = onnx.load(str(path)).graph
    return ({initializer.name: tuple(initializer.dims) for initializer in graph.initializer},
            [(value.name, str(value.type)) for value in [*graph.input, *graph.output]],
            sorted(node.op_type for node in graph.node))


def test_the_exported_student_has_the_layout_of_a_model_trained_alone(setup, taught):
    exported = []
    for run in (taught[0], setup["plain"]):
        assert export.main(["--weights", str(run / "weights" / "best.pt"), "--include", "onnx", "--imgsz", "64",
                            "--device", "cpu"]) == 0
        exported.append(_layout(run / "weights" / "best.onnx"))
    assert exported[0] == exported[1]


@pytest.mark.parametrize("teacher, flags, message", [
    ("other_classes", [], "it predicts 3 classes (x, y, z), the data 3 classes (a, b, c): a teacher must be"),
    ("p6", [], "its head reads levels of strides [8, 16, 32, 64], the student's [8, 16, 32]"),
    ("two_anchors", ["--distill", "logit"], "has 2 anchors per cell, the student 3; the logit term compares them"),
    ("missing", [], "weights not found: "),
    (None, ["--distill", "logit"], "--distill and --distill-weight choose how a teacher teaches: give --teacher"),
    (None, ["--distill-weight", "2"], "give --teacher T.pt"),
])
def test_a_teacher_that_does_not_fit_is_one_line(setup, tmp_path, capsys, teacher, flags, message):
    two_anchors = tmp_path / "two_anchors.yaml"
    layers = yaml.safe_load((CONFIGS_DIR / "models" / "yolov5s.yaml").read_text())
    two_anchors.write_text(yaml.safe_dump({**layers, "anchors": [[10, 13, 16, 30]] * 3}))
    files = {"other_classes": lambda path: save_teacher(path, names=["x", "y", "z"]),
             "p6": lambda path: save_teacher(path, "yolov5n6.yaml"),
             "two_anchors": lambda path: save_teacher(path, str(two_anchors)), "missing": lambda path: path}
    given = ["--teacher", str(files[teacher](tmp_path / f"{teacher}.pt"))] if teacher else []
    try:
        code = train.main(train_args(setup["data"], tmp_path / "runs", *given, *flags))
    except SystemExit as stopped:
        code = stopped.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "runs").exists()  # before any run folder


@needs_shared
def test_yolov5_s_own_checkpoint_teaches_only_its_classes(setup, tmp_path, capsys):
    assert train.main(train_args(setup["data"], tmp_path, "--teacher", str(YOLOV5N))) == 2
    err = capsys.readouterr().err.strip()
    assert f"--teacher {YOLOV5N}: it predicts 80 classes (person, bicycle, car, ...), the data 3 classes (a, b, c)" \
           in err and len(err.splitlines()) == 1


def _stop_at_step(monkeypatch, step: int) -> None:
    seen = []

    def before_step(self, run, index, batch) -> None:
        seen.append(index)
        if len(seen) >= step:
            run.control.stop_signal = signal.SIGTERM

    monkeypatch.setattr(hooks.SignalStop, "before_step", before_step)


def _state(run):
    last = TrainingCheckpoint.load(run / "weights" / "last.pt")
    momentum = [entry["momentum_buffer"] for entry in last.optimizer["state"].values()]
    return [*last.model["state_dict"].values(), *last.ema["state_dict"].values(), *momentum,
            *last.distill["projectors"].values()]


def test_a_resumed_run_with_a_teacher_is_bit_identical_and_refuses_a_changed_teacher(setup, tmp_path, monkeypatch,
                                                                                     capsys):
    teacher = save_teacher(tmp_path / "teacher.pt")
    flags = ("--noval", "--noplots", "--teacher", str(teacher), "--distill", "both")
    assert train.main(train_args(setup["data"], tmp_path / "straight", *flags, epochs=3)) == 0
    with monkeypatch.context() as patch:
        _stop_at_step(patch, 4)  # inside the second epoch (two steps an epoch)
        assert train.main(train_args(setup["data"], tmp_path / "stopped", *flags, epochs=3)) == 143
    run = tmp_path / "stopped" / "exp"
    original = teacher.read_bytes()
    save_teacher(teacher, seed=1)  # another teacher at the same path
    capsys.readouterr()
    assert train.main(["--resume", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert (f"the teacher {teacher} changed since the run began (sha256 {file_sha256(teacher)[:12]}, the run's "
            f"{hashlib.sha256(original).hexdigest()[:12]})") in err and len(err.splitlines()) == 1
    teacher.write_bytes(original)
    assert train.main(["--resume", str(run), "--no-progress"]) == 0
    for expected, resumed in zip(_state(tmp_path / "straight" / "exp"), _state(run), strict=True):
        assert torch.equal(expected, resumed)


def test_amp_on_tiles_with_a_teacher(setup, tmp_path):
    flags = ("--noval", "--noplots", "--teacher", str(setup["teacher"]), "--amp", "--tile", "64")
    assert train.main(train_args(setup["data"], tmp_path, *flags, epochs=1)) == 0
    with open(tmp_path / "exp" / "results.csv") as handle:
        assert float(next(csv.DictReader(handle))["train/distill_loss"]) > 0


def test_evolve_keeps_the_teacher_and_its_hyp_keys_fixed(setup, tmp_path):
    pytest.importorskip("optuna")
    flags = ("--teacher", str(setup["teacher"]), "--evolve", "1", "--project", str(tmp_path))
    assert train.main(train_args(setup["data"], tmp_path, *flags, epochs=1)) == 0
    with open(tmp_path / "exp" / "evolve.csv") as handle:
        trial = next(csv.DictReader(handle))
    assert (float(trial["distill"]), float(trial["distill_off"])) == (0.1, 0.0667) and trial["state"] == "complete"
    with open(next(tmp_path.glob("exp/trial*/**/results.csv"))) as handle:
        assert float(next(csv.DictReader(handle))["train/distill_loss"]) > 0
