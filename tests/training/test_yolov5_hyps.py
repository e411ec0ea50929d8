"""Training with yolov5's hyp files as they are: `anchors` in the hyp (hyp.VOC.yaml, hyp.Objects365.yaml) gives a new
run's model that many anchors per level, computed by AutoAnchor, in place of the model yaml's and the weights'."""

from __future__ import annotations

import logging

import pytest

from detect import train
from detect.models.weights import load_model
from tests.training.helpers import tiny_dataset, train_args


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny"))


def anchors_px(weights):
    model = load_model(weights)
    return model.detect.anchors * model.stride.view(-1, 1, 1)


def test_the_hyps_anchors_replace_the_yamls_and_the_weights(data, tmp_path, caplog, monkeypatch):
    monkeypatch.chdir(tmp_path)  # yolov5's data/hyps/ is not here: our copy of hyp.VOC.yaml (anchors: 3.412)
    with caplog.at_level(logging.INFO, logger="detect.models.transfer"):
        # the hyp evolution tutorial's command (yolov5's VOC hyp), sizes shrunk
        assert train.main(train_args(data, tmp_path, "--hyp", "data/hyps/hyp.VOC.yaml", "--noval", epochs=1)) == 0
    assert sum("asks for 3 anchors per level" in record.message for record in caplog.records) == 1
    first = anchors_px(tmp_path / "exp" / "weights" / "last.pt")
    assert first.shape == (3, 3, 2) and first.max() < 64  # the tiny data's box sizes (up to 60 px), not yolov5n's
    hyp = tmp_path / "hyp.yaml"
    hyp.write_text("anchors: 4.4\n")  # yolov5 rounds: 4 per level, from the labels, whatever the weights hold
    assert train.main(train_args(data, tmp_path, "--weights", str(tmp_path / "exp" / "weights" / "last.pt"),
                                 "--hyp", str(hyp), "--noval", "--name", "four", epochs=1)[2:]) == 0
    assert anchors_px(tmp_path / "four" / "weights" / "last.pt").shape == (3, 4, 2)


def test_noautoanchor_with_the_hyps_anchors_is_refused_naming_the_hyp(data, tmp_path, capsys):
    assert train.main(train_args(data, tmp_path, "--hyp", "hyp.Objects365.yaml", "--noautoanchor")) == 2
    err = capsys.readouterr().err
    assert "--noautoanchor: hyp.Objects365.yaml gives `anchors: 3`" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "exp").exists()
