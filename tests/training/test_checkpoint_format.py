"""A last.pt written before the typed checkpoint (format detect-train-1, commit a0a3607) still loads and resumes.

fixtures/last-detect-train-1.pt was made by a0a3607's `python -m detect.train --cfg tiny.yaml --data data/data.yaml
--imgsz 64 --batch-size 4 --epochs 2 --workers 0 --device cpu --project runs --no-progress --noplots --noval`, run in
a folder holding fixtures/tiny.yaml and tests.training.helpers.tiny_dataset(Path("data")), stopped by early stopping
after epoch 1 (every path in it is relative, so the test rebuilds that folder and resumes there)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from detect import train
from detect.errors import UserError
from detect.models.safe_io import load_checkpoint
from detect.models.weights import load_model
from detect.training.resume import TrainingCheckpoint
from tests.training.helpers import tiny_dataset

FIXTURES = Path(__file__).parent / "fixtures"
OLD_LAST = FIXTURES / "last-detect-train-1.pt"


def test_the_old_payload_reads_as_a_typed_checkpoint():
    checkpoint = TrainingCheckpoint.load(OLD_LAST)
    assert checkpoint.resumable and checkpoint.counters.epoch == 1 and checkpoint.counters.iteration == 2
    assert checkpoint.settings.cfg == "tiny.yaml" and checkpoint.settings.epochs == 2
    assert checkpoint.ema_updates >= 1 and checkpoint.hyp.lr0 == 0.01
    assert checkpoint.to_payload().keys() == load_checkpoint(OLD_LAST).keys()  # the same layout is written today
    assert load_model(OLD_LAST).names == checkpoint.ema["names"]  # val, predict and export read it too


def test_an_old_last_pt_resumes_to_the_end(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tiny_dataset(Path("data"))
    (tmp_path / "runs" / "exp" / "weights").mkdir(parents=True)
    shutil.copy(OLD_LAST, tmp_path / "runs" / "exp" / "weights" / "last.pt")
    assert train.main(["--resume", "runs/exp", "--no-progress"]) == 0
    resumed = TrainingCheckpoint.load(tmp_path / "runs" / "exp" / "weights" / "last.pt")
    assert resumed.counters.epoch == 2 and resumed.counters.iteration == 4


def test_a_payload_of_another_format_is_one_line(tmp_path):
    payload = load_checkpoint(OLD_LAST)
    with pytest.raises(UserError, match="not a detect training checkpoint"):
        TrainingCheckpoint.from_payload({**payload, "format": "detect-train-0"}, "old.pt")
