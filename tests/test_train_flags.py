"""yolov5's spellings of train's flags: --local_rank, a bare --evolve, --weights '' and the aliases of every CLI."""

from __future__ import annotations

import logging
import os

import pytest

from detect import export, predict, train, val
from detect.models.__main__ import parse_args as models_args
from tests.training.helpers import tiny_dataset

TINY = {"cfg": "yolov5n.yaml", "imgsz": 64, "batch_size": 4, "epochs": 1, "workers": 0, "device": "cpu",
        "progress": False, "noval": True}


def test_a_bare_evolve_runs_yolov5s_300_trials():
    assert train.parse_args(["--evolve"]).evolve == 300
    assert train.parse_args(["--evolve", "7"]).evolve == 7


@pytest.mark.parametrize("flag", ["--local_rank", "--local-rank"])
def test_local_rank_is_accepted_and_the_environment_wins(flag, monkeypatch, caplog):
    assert train.parse_args([flag, "3"]).local_rank == 3
    monkeypatch.setenv("LOCAL_RANK", "1")
    with caplog.at_level(logging.INFO):
        train._agree_on_local_rank(0)
    assert os.environ["LOCAL_RANK"] == "1"
    assert "--local_rank 0 differs from LOCAL_RANK=1 in the environment: using 1" in caplog.text
    monkeypatch.delenv("LOCAL_RANK")
    train._agree_on_local_rank(2)  # an old launcher that passes the flag only
    assert os.environ["LOCAL_RANK"] == "2"


def test_empty_weights_train_from_scratch(tmp_path, caplog):
    data = tiny_dataset(tmp_path / "data")
    with caplog.at_level(logging.INFO):
        result = train.run(weights="", data=str(data), project=str(tmp_path / "runs"), **TINY)
    assert result.last.is_file() and "imported" not in caplog.text and "transferred" not in caplog.text


@pytest.mark.parametrize("parse, argv, field, value", [
    (train.parse_args, ["--img", "320"], "imgsz", 320),
    (train.parse_args, ["--img-size", "320"], "imgsz", 320),
    (train.parse_args, ["--batch", "32"], "batch_size", 32),
    (val.parse_args, ["--weights", "w.pt", "--img-size", "64"], "imgsz", 64),
    (val.parse_args, ["--weights", "w.pt", "--conf", "0.25", "--iou", "0.65"], "iou_thres", 0.65),
    (predict.parse_args, ["--weights", "w.pt", "--img", "64"], "imgsz", (64,)),
    (export.parse_args, ["--weights", "w.pt", "--img-size", "64", "96"], "imgsz", (64, 96)),
    (models_args, ["--img", "320"], "imgsz", 320),
])
def test_yolov5_spellings_on_every_cli(parse, argv, field, value):
    parsed = parse(argv)
    assert vars(parsed)[field] == value


def test_noplots_writes_no_pictures(tmp_path):
    data = tiny_dataset(tmp_path / "data")
    result = train.run(data=str(data), project=str(tmp_path / "runs"), noplots=True,
                       **{**TINY, "noval": False})
    assert result.best.is_file()
    pictures = [path.name for path in result.save_dir.rglob("*") if path.suffix in (".png", ".jpg")]
    assert pictures == []


@pytest.mark.parametrize("main, argv", [
    (val.main, ["--weights", "missing.pt", "--dnn"]),
    (predict.main, ["--weights", "missing.pt", "--dnn", "--update", "--data", "coco128.yaml"]),
    (export.main, ["--weights", "missing.pt", "--inplace", "--workspace", "4", "--verbose"]),
    (train.main, ["--weights", "missing.pt", "--entity", "me", "--bbox_interval", "2", "--upload_dataset",
                  "--bucket", "b", "--artifact_alias", "latest"]),
])
def test_yolov5_flags_for_services_are_accepted_and_named(main, argv, tmp_path, monkeypatch, caplog, capsys):
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO):
        assert main(argv) == 2  # the missing weights, after the flags were taken
    assert "weights not found: missing.pt" in capsys.readouterr().err
    for flag in argv[2:]:
        if flag.startswith("--"):
            assert f"{flag} is " in caplog.text and "detect does not use it" in caplog.text
