"""`python -m detect.train --weights <yolov5 last.pt>` trains on: yolov5's architecture and weights, a fresh optimizer."""

from __future__ import annotations

import logging

import pytest

from detect import train
from detect.models.weights import load_model
from tests.models.yolov5_standins import standin_checkpoint
from tests.training.helpers import tiny_dataset, train_args


@pytest.mark.parametrize("version", ["v5.0", "v7.0"])
def test_training_continues_from_a_yolov5_last_pt(tmp_path, caplog, version):
    data = tiny_dataset(tmp_path / "data")
    weights = tmp_path / "yolov5_last.pt"
    standin_checkpoint(weights, version, names=("a", "b", "c"))  # mid-run: optimizer state, numpy, PosixPath
    flags = train_args(data, tmp_path / "runs", "--noval", epochs=1)[2:]  # without --cfg: the weights' model
    with caplog.at_level(logging.INFO):
        assert train.main([*flags, "--weights", str(weights)]) == 0
    messages = [record.getMessage() for record in caplog.records]
    assert sum("starts a fresh optimizer" in message for message in messages) == 1
    transferred = next(message for message in messages if message.startswith("transferred"))
    total = len(load_model(weights).state_dict())
    assert transferred.startswith(f"transferred {total}/{total} tensors")
    trained = load_model(tmp_path / "runs" / "exp" / "weights" / "last.pt")
    first = "model.0.conv.conv.weight" if version == "v5.0" else "model.0.conv.weight"
    assert first in trained.state_dict() and trained.names == ["a", "b", "c"]
