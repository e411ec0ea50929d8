"""Checkpoints as yolov5 v5.0 to v7.0 write them (tests/models/yolov5_standins.py) import exactly; v5.0's blocks
have yolov5's parameter counts."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from detect.errors import UserError
from detect.models import build_model
from detect.models.safe_io import read_yolov5_checkpoint
from detect.models.spec import spec_from_yolov5_yaml
from detect.models.weights import load_model
from detect.models.yolov5_pickle import RESTRICTED_PICKLE
from tests.models.yolov5_standins import VERSIONS, standin_checkpoint, yolov5_yaml

# What train.py leaves on disk: best.pt / last.pt after strip_optimizer (fp16), and a mid-run last.pt or
# --save-period epoch<N>.pt with the optimizer (fp16 as train.py saves it, or fp32).
KINDS = {"stripped": {"stripped": True}, "mid-run fp16": {"stripped": False},
         "mid-run fp32": {"stripped": False, "half": False}}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("version", VERSIONS)
def test_each_version_and_kind_imports_to_the_same_outputs(tmp_path, version, kind):
    path = tmp_path / "best.pt"
    reference = standin_checkpoint(path, version, **KINDS[kind])
    model = load_model(path)
    assert model.names == ["cat", "dog", "bird"] and model.stride.tolist() == [8, 16, 32]
    assert set(model.state_dict()) == set(reference.state_dict())
    images = torch.rand(2, 3, 96, 128)
    with torch.no_grad():
        torch.testing.assert_close(model.predict(images), reference.predict(images), rtol=0, atol=0)


@pytest.mark.parametrize("version", ["v5.0", "v7.0"])
def test_bottleneck_csp_models_keep_their_activation(tmp_path, version):
    # v5.0's BottleneckCSP mixes with LeakyReLU(0.1), v7.0's with SiLU: only the pickled module class tells which.
    path = tmp_path / "csp.pt"
    reference = standin_checkpoint(path, version, csp=True)
    model = load_model(path)
    activation = type(model.model[2].act).__name__
    assert activation == ("LeakyReLU" if version == "v5.0" else "SiLU")
    images = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model.predict(images), reference.predict(images), rtol=0, atol=0)


def test_a_checkpoint_without_ema_takes_its_model(tmp_path):
    path = tmp_path / "last.pt"
    reference = standin_checkpoint(path, "v6.2", ema=False)
    images = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(load_model(path).predict(images), reference.predict(images), rtol=0, atol=0)


def test_inert_values_come_back_as_plain_ones(tmp_path):
    path = tmp_path / "last.pt"
    standin_checkpoint(path, "v7.0")
    payload = torch.load(path, map_location="cpu", pickle_module=RESTRICTED_PICKLE, weights_only=False)
    assert payload["opt"]["project"] == "runs/train" and payload["opt"]["evolve_population"] == "data/hyps"
    assert isinstance(payload["best_fitness"], np.ndarray) and payload["best_fitness"].tolist() == [0.3512]
    momentum = payload["optimizer"]["param_groups"][0]["momentum"]
    assert isinstance(momentum, np.float64) and momentum == 0.80959
    assert payload["git"] == {"remote": None, "branch": None, "commit": None}


def test_an_optimizer_state_is_one_info_line(tmp_path, caplog):
    mid_run, stripped = tmp_path / "last.pt", tmp_path / "best.pt"
    standin_checkpoint(mid_run, "v7.0")
    standin_checkpoint(stripped, "v7.0", stripped=True)
    with caplog.at_level(logging.INFO, logger="detect.models"):
        load_model(mid_run)
        load_model(stripped)
    fresh = [r.message for r in caplog.records if "optimizer state" in r.message]
    assert len(fresh) == 1 and str(mid_run) in fresh[0] and "starts a fresh optimizer" in fresh[0]
    assert not any("ignored" in r.message for r in caplog.records)


def test_fields_yolov5_never_writes_are_ignored_with_one_info_line(tmp_path, caplog):
    path = tmp_path / "best.pt"
    standin_checkpoint(path, "v6.2", stripped=True, extra_fields={"comet_id": "abc", "notes": {"by": "fork"}})
    with caplog.at_level(logging.INFO, logger="detect.models"):
        load_model(path)
    ignored = [r.message for r in caplog.records if "ignored" in r.message]
    assert len(ignored) == 1 and ignored[0].endswith("comet_id, notes")


# Exact parameter counts at 80 classes of yolov5 v5.0's own Model() (its "Model Summary" line), matching the
# v5.0 README's 7.3 / 21.4 / 47.0 / 87.7 M; v5.0 had no n. panet: models/hub/yolov5-panet.yaml (BottleneckCSP, l).
V5_PARAMETERS = {"s": 7_276_605, "m": 21_375_645, "l": 47_056_765, "x": 87_775_965}
V5_PANET_PARAMETERS = 47_818_749


def _parameters(yaml: dict, activation: str = "silu") -> int:
    spec = spec_from_yolov5_yaml(yaml, yaml["anchors"], "v5.0 yaml", activation)
    return sum(p.numel() for p in build_model(spec).parameters())


@pytest.mark.parametrize("size", V5_PARAMETERS)
def test_v5_focus_spp_models_have_yolov5s_parameter_counts(size):
    assert _parameters(yolov5_yaml("v5.0", size)) == V5_PARAMETERS[size]


def test_v5_bottleneck_csp_model_has_yolov5s_parameter_count():
    assert _parameters(yolov5_yaml("v5.0", "l", csp=True), "leaky_relu") == V5_PANET_PARAMETERS


def test_a_v7_yaml_asking_for_an_activation_detect_does_not_build_is_refused():
    yaml = {**yolov5_yaml("v7.0"), "activation": "nn.ELU()"}  # v7.0's optional field, eval'd by yolov5
    with pytest.raises(UserError, match=r"custom.pt: key 'activation' 'nn.ELU\(\)' is not one detect builds"):
        spec_from_yolov5_yaml(yaml, yaml["anchors"], "custom.pt", "silu")
    assert spec_from_yolov5_yaml({**yaml, "activation": "nn.LeakyReLU(0.1)"}, None, "custom.pt").activation == \
        "leaky_relu"


def test_v5_layout_focus_stem_spp_and_anchor_grid(tmp_path: Path):
    # v5.0's Detect stores anchor_grid (pixels) next to anchors (grid units); the import drops the derived one.
    path = tmp_path / "v5.pt"
    standin_checkpoint(path, "v5.0", size="s")
    state = read_yolov5_checkpoint(path).state_dict
    assert next(iter(state)) == "model.0.conv.conv.weight"
    assert state["model.0.conv.conv.weight"].shape == (32, 12, 3, 3)  # Focus: 4 x 3 channels in, k=3
    assert state["model.8.cv2.conv.weight"].shape == (512, 1024, 1, 1)  # SPP: its input and 3 pools
    assert state["model.24.anchor_grid"].shape == (3, 1, 3, 1, 1, 2)
    assert "model.24.anchor_grid" not in load_model(path).state_dict()
