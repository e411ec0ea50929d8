"""Issue 43, item 4, run as a user runs the CLIs: a checkpoint whose tensors or names do not fit its own yaml, or whose
weights are NaN, is refused in one line naming the file (predict, val, export, train --weights, torch.hub); a
checkpoint of another class count still fine-tunes, and a diverged last.pt is not resumed."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from detect import train
from detect.errors import UserError
from detect.models import build_model
from detect.models.safe_io import load_checkpoint, save_checkpoint
from detect.models.weights import model_state
from tests.hostile import assert_refused, tree
from tests.training.helpers import tiny_dataset, train_args
from tests.training.test_checkpoint_format import OLD_LAST
from tests.user_run import REPO, run_cli

NAMES = ["a", "b", "c"]
SHAPE = "model.2.cv1.conv.weight is (7, 32, 1, 1) in the file, (16, 32, 1, 1) in the model"
HEAD = "2 class names describe: model.24.m.0.weight is (24, 64, 1, 1) in the file, (21, 64, 1, 1) in the model"
NAN = "292 of 349 tensors hold NaN or inf (the first model.0.conv.weight)"


def hostile_checkpoint(folder: Path, case: str) -> Path:
    """A 3-class yolov5n checkpoint with one tensor of another shape ('shape'), two names ('names'), or every
    weight NaN ('nan')."""
    torch.manual_seed(0)
    state = model_state(build_model("yolov5n.yaml", num_classes=len(NAMES), names=NAMES))
    if case == "shape":
        state["state_dict"]["model.2.cv1.conv.weight"] = torch.zeros(7, 32, 1, 1)
    elif case == "names":
        state["names"] = NAMES[:2]
    else:
        for tensor in state["state_dict"].values():
            if tensor.is_floating_point():
                tensor.fill_(math.nan)
    return save_checkpoint(folder / f"{case}.pt", {"model": state})


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """A folder with a photo and a tiny dataset."""
    folder = tmp_path_factory.mktemp("inputs")
    cv2.imwrite(str(folder / "photo.jpg"), np.random.default_rng(0).integers(0, 255, (64, 80, 3), np.uint8))
    tiny_dataset(folder / "set", count=4)
    return folder


def cli_args(module: str, weights: Path, inputs: Path) -> list[str]:
    data = str(inputs / "set" / "data.yaml")
    return {"detect.predict": ["--source", str(inputs / "photo.jpg"), "--imgsz", "64"],
            "detect.val": ["--data", data, "--imgsz", "64", "--workers", "0", "--cache-dir", str(inputs / "cache")],
            "detect.export": ["--imgsz", "64", "--output-dir", "exported"],
            "detect.train": [*train_args(Path(data), Path("runs"), epochs=1)[2:], "--cache-dir", str(inputs / "cache")],
            }[module] + ["--weights", str(weights), "--device", "cpu"]


@pytest.mark.parametrize(("module", "case", "expected"), [
    ("detect.predict", "shape", SHAPE),
    ("detect.predict", "nan", NAN),  # case 12: it predicted "no detections"
    ("detect.val", "names", HEAD),
    ("detect.export", "nan", NAN),
    ("detect.train", "shape", SHAPE),
    ("detect.train", "nan", NAN),
])
def test_each_cli_refuses_weights_that_do_not_fit_or_are_not_finite(tmp_path, inputs, module, case, expected):
    weights = hostile_checkpoint(tmp_path, case)
    line = assert_refused(run_cli(module, *cli_args(module, weights, inputs), cwd=tmp_path), f"{weights}: ", expected)
    assert line.startswith(f"error: {weights}: ")
    assert sorted(path.name for path in tmp_path.iterdir()) == [weights.name]  # no run folder, no export


@pytest.mark.parametrize(("case", "expected"), [("shape", SHAPE), ("names", HEAD), ("nan", NAN)])
def test_torch_hub_refuses_them_in_one_line(tmp_path, case, expected):
    weights = hostile_checkpoint(tmp_path, case)
    with pytest.raises(UserError) as refused:
        torch.hub.load(str(REPO), "custom", path=str(weights), source="local", device="cpu")
    assert str(refused.value).startswith(f"{weights}: ") and expected in str(refused.value)


def test_weights_of_another_class_count_still_fine_tune(tmp_path, inputs, caplog):
    torch.manual_seed(0)
    two = build_model("yolov5n.yaml", num_classes=2, names=["x", "y"])
    weights = save_checkpoint(tmp_path / "two.pt", {"model": model_state(two)})
    flags = train_args(inputs / "set" / "data.yaml", tmp_path / "runs", "--noval", "--cache-dir",
                       str(tmp_path / "cache"), epochs=1)[2:]
    with caplog.at_level(logging.INFO):
        assert train.main([*flags, "--weights", str(weights)]) == 0
    transferred = next(record.getMessage() for record in caplog.records
                       if record.getMessage().startswith("transferred"))
    assert transferred.startswith("transferred 343/349 tensors")  # all but the Detect head's 3 convs


def test_a_diverged_last_pt_is_not_resumed(tmp_path):
    payload = load_checkpoint(OLD_LAST)  # stopped after epoch 1 of 2: resumable
    payload["model"]["state_dict"]["model.0.bn.running_var"].fill_(math.nan)  # what one inf activation leaves
    last = save_checkpoint(tmp_path / "runs" / "exp" / "weights" / "last.pt", payload)
    before = tree(tmp_path)
    done = run_cli("detect.train", "--resume", str(last), cwd=tmp_path)
    assert_refused(done, f"{last}: 1 of ", "tensors hold NaN or inf (the first model.0.bn.running_var)")
    assert tree(tmp_path) == before
