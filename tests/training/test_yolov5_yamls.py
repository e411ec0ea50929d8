"""Training from ultralytics/yolov5's own model yamls: `anchors: 3` gets AutoAnchor's anchors before the first
step, a P6 model trains (its --imgsz rounded up to its stride 64), and --noautoanchor with `anchors: 3` is refused."""

from __future__ import annotations

import logging

import pytest
import torch
import yaml

from detect import train
from detect.models.safe_io import load_checkpoint
from detect.models.weights import load_model
from tests.models.yolov5_yamls import p5, p6, pyramid
from tests.training.helpers import tiny_dataset, train_args


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny"))


def yolov5_file(tmp_path, mapping: dict, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**mapping, "depth_multiple": 0.33, "width_multiple": 0.125}))
    return str(path)


def p34(tmp_path) -> str:
    """yolov5-p34 (Detect on P3 and P4, `anchors: 3`), small."""
    return yolov5_file(tmp_path, {**p5("s"), "anchors": 3, "head": pyramid([1024], highest=4)}, "yolov5-p34")


def test_anchors_as_a_number_are_computed_from_the_labels_and_saved(data, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="detect.models.transfer"):
        code = train.main(train_args(data, tmp_path, "--cfg", p34(tmp_path), "--noval", epochs=1))
    assert code == 0
    computed = [r.message for r in caplog.records if "asks for 3 anchors per level" in r.message]
    assert len(computed) == 1
    model = load_model(tmp_path / "exp" / "weights" / "last.pt")
    anchors_px = model.detect.anchors * model.stride.view(-1, 1, 1)
    assert anchors_px.shape == (2, 3, 2)
    # Not the placeholders 0..5 px: sizes of the tiny data's boxes (about 30-60 px of 128, scaled to 64)
    assert anchors_px.min() > 3 and anchors_px.max() < 64
    areas = anchors_px.prod(-1).flatten()
    assert torch.equal(areas, areas.sort().values)  # smallest on P3, as AutoAnchor orders them
    stored = load_checkpoint(tmp_path / "exp" / "weights" / "last.pt")["model"]["config"]
    assert stored["anchors"] == 3 and isinstance(stored["backbone"][0], dict)  # our schema, as parsed


def test_noautoanchor_with_anchors_as_a_number_is_refused(data, tmp_path, capsys):
    assert train.main(train_args(data, tmp_path, "--cfg", p34(tmp_path), "--noautoanchor")) == 2
    err = capsys.readouterr().err
    assert "--noautoanchor" in err and "gives `anchors: 3`" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "exp").exists()


def test_a_p6_yolov5_yaml_trains_at_a_multiple_of_stride_64(data, tmp_path, caplog):
    cfg = yolov5_file(tmp_path, p6("n"), "yolov5n6")
    with caplog.at_level(logging.WARNING, logger="detect.training.setup.recipe"):
        assert train.main(train_args(data, tmp_path, "--cfg", cfg, epochs=1)) == 0
    assert any("--imgsz 64: the model needs a multiple of its largest stride 64, at least 128: training at 128"
               in r.message for r in caplog.records)
    config = yaml.safe_load((tmp_path / "exp" / "config.yaml").read_text())
    assert config["settings"]["imgsz"] == 128 if "settings" in config else config["imgsz"] == 128
    assert load_model(tmp_path / "exp" / "weights" / "best.pt").detect.level_strides == (8, 16, 32, 64)
