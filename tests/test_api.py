"""The Python API: train.run and val.run take the CLI's flags as keyword arguments, with the same checks."""

from __future__ import annotations

import dataclasses
import logging
import re

import pytest

from detect import train, val
from detect.config import flag_name
from detect.errors import UserError
from detect.training.settings import TrainSettings
from tests.training.helpers import tiny_dataset

TINY_RUN = {"cfg": "yolov5n.yaml", "imgsz": 64, "batch_size": 4, "epochs": 1, "workers": 0, "device": "cpu",
            "progress": False}


def test_train_run_then_val_run_from_a_script(tmp_path, caplog):
    data = tiny_dataset(tmp_path / "data")
    with caplog.at_level(logging.INFO):
        result = train.run(data=str(data), project=str(tmp_path / "runs"), **TINY_RUN)
    phases = next(record.message for record in caplog.records if record.message.startswith("phases: "))
    for phase in ("label check", "model and AutoAnchor", "training", "validation", "saves", "final evaluation",
                  "plots"):
        assert f"{phase} " in phases, phases
    assert result.save_dir == tmp_path / "runs" / "exp" and result.epochs_run == 1
    assert result.best.is_file() and result.last.is_file() and 0 <= result.metrics.map50_95 <= result.metrics.map50
    scored = val.run(weights=str(result.best), data=str(data), imgsz=64, device="cpu", workers=0,
                     project=str(tmp_path / "val"), progress=False)
    assert scored.images == 8 and abs(scored.metrics.map50 - result.metrics.map50) < 1e-6


@pytest.mark.parametrize("options, message", [
    ({"epochs": 0}, "--epochs 0: must be a positive integer"),
    ({"imgsz": 16}, "--imgsz 16: must be an integer in [32, 8192]"),
    ({"freeze": [3, -1]}, "--freeze (3, -1): must be an integer >= 0"),
    ({"optimizer": "Lion"}, "--optimizer 'Lion': choose one of SGD, Adam, AdamW"),
    ({"epochs": "3"}, "key 'epochs' must be int"),
    ({"batchsize": 8}, "unknown key 'batchsize'"),
])
def test_train_run_refuses_a_bad_keyword_with_the_cli_line(tmp_path, options, message):
    with pytest.raises(UserError, match=re.escape(message)):
        train.run(cfg="yolov5n.yaml", project=str(tmp_path), **options)
    assert not any(tmp_path.iterdir())  # nothing made


def test_val_run_refuses_a_bad_keyword_as_train_run_does():
    with pytest.raises(UserError, match=r"^--conf-thres 2.0: must be a number in \[0, 1\]$"):
        val.run(weights="any.pt", conf_thres=2)
    with pytest.raises(UserError, match=r"^detect.val.run: unknown key 'dataa' \(known: weights, data, "):
        val.run(weights="any.pt", dataa="coco128.yaml")
    with pytest.raises(UserError, match=r"^detect.train.run: unknown key 'cfgg' \(known: cfg, weights, "):
        train.run(cfgg="yolov5n.yaml")


def test_the_python_api_takes_keywords_only():
    for function in (train.run, val.run):
        with pytest.raises(TypeError, match="positional"):
            function("yolov5n.yaml")


def test_every_setting_is_a_flag_with_its_default(capsys):
    # parse_args leaves out what is not given, so TrainSettings' own defaults apply: one home for them.
    not_settings = {"resume": False, "profile": None, "evolve": None, "evolve_sampler": "tpe", "evolve_storage": None,
                    "local_rank": None, "mlflow": False}
    assert vars(train.parse_args([])) == not_settings
    args = vars(train.parse_args(["--img", "320", "--freeze", "10", "--no-progress", "--cache", "--no-amp"]))
    assert args == {"imgsz": 320, "freeze": [10], "progress": False, "cache": "ram", "amp": False, **not_settings}
    with pytest.raises(SystemExit):
        train.parse_args(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for field in dataclasses.fields(TrainSettings):
        assert flag_name(field) in help_text, field.name
    assert "--epochs EPOCHS (default 100)" in help_text and "--workers WORKERS data loader workers per rank (default 8)" in help_text
