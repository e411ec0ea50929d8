"""ultralytics/yolov5's own model yamls build through --cfg's path with yolov5's exact parameter counts; the blocks
they add (ghost, transformer, yolov3's) run; Detect on 2 to 5 levels runs and trains; bad rows are named."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml
from torch import nn

from detect.config import Hyp
from detect.errors import ConfigError
from detect.models import build_model, load_model_spec, parse_model_spec
from detect.models.layers import GhostBottleneck
from detect.models.spec import spec_from_yolov5_yaml
from detect.models.weights import load_model
from detect.training.loss import DetectionLoss, LossSettings
from tests.models.yolov5_standins import standin_checkpoint
from tests.models.yolov5_yamls import PARAMETERS, all_yamls, p5, p7, yolov3_tiny
from tests.training.reference_loss import ReferenceLoss, flat_targets

YAMLS = all_yamls()


def test_the_structures_cover_every_yolov5_yaml():
    assert sorted(YAMLS) == sorted(PARAMETERS) and len(YAMLS) == 23


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_each_yolov5_yaml_has_yolov5s_parameter_count(name):
    # On the meta device: shapes and counts without allocating (yolov5-p7 has 144M parameters).
    with torch.device("meta"):
        model = build_model(spec_from_yolov5_yaml(copy.deepcopy(YAMLS[name]), None, name))
    assert sum(p.numel() for p in model.parameters()) == PARAMETERS[name]


def test_a_yolov5_file_loads_as_cfg_and_its_spec_is_stored_in_our_schema(tmp_path):
    path = tmp_path / "yolov5s-ghost.yaml"
    path.write_text(yaml.safe_dump(YAMLS["yolov5s-ghost"]))
    spec = load_model_spec(path)
    assert spec.layers[1].module == "GhostConv" and spec.layers[2].args.repeat == 3
    # A checkpoint stores spec.mapping: ours, which parses to the same layers
    assert isinstance(spec.mapping["backbone"][0], dict)
    assert parse_model_spec(spec.mapping, "stored").layers == spec.layers


def small(model: dict, depth: float = 0.33, width: float = 0.125) -> dict:
    """A yolov5 mapping scaled down to run in a test."""
    return {**copy.deepcopy(model), "depth_multiple": depth, "width_multiple": width}


LEVELS = {  # levels -> a small model of that many Detect levels and its strides
    2: (small(yolov3_tiny(), 1.0, 0.0625), (16, 32)),
    4: (small(YAMLS["yolov5-p2"]), (4, 8, 16, 32)),
    5: (small(p7()), (8, 16, 32, 64, 128)),
}


@pytest.mark.parametrize("levels", sorted(LEVELS))
def test_forward_predict_and_loss_on_other_level_counts(levels):
    mapping, strides = LEVELS[levels]
    model = build_model(spec_from_yolov5_yaml(mapping, None, f"{levels} levels"), num_classes=3)
    assert model.detect.level_strides == strides and model.max_stride == strides[-1]
    imgsz = 2 * strides[-1]
    raw = model.train()(torch.rand(2, 3, imgsz, imgsz))
    assert [tuple(r.shape) for r in raw] == [(2, 3, imgsz // s, imgsz // s, 8) for s in strides]
    with torch.no_grad():
        assert model.eval().predict(torch.rand(1, 3, imgsz, imgsz)).shape == (1, sum(3 * (imgsz // s) ** 2
                                                                                     for s in strides), 8)
    model.detect.anchors.copy_(torch.rand_like(model.detect.anchors) * 4 + 0.5)  # stand-ins for AutoAnchor's
    settings = LossSettings.from_hyp(Hyp(), levels, 3, imgsz)
    targets = torch.full((2, 8, 5), -1.0)
    targets[:, :3] = torch.tensor([[0, 0.5, 0.5, 0.3, 0.4], [1, 0.2, 0.7, 0.1, 0.1], [2, 0.8, 0.3, 0.6, 0.5]])
    criterion = DetectionLoss(settings, model.detect.anchors, 3)
    assert criterion.balance == ((4.0, 1.0, 0.4) if levels == 3 else (4.0, 1.0, 0.25, 0.06, 0.02)[:levels])
    total, items = criterion(raw, targets)
    _, expected_items = ReferenceLoss(settings, model.detect.anchors, 3)(raw, flat_targets(targets))
    torch.testing.assert_close(items, expected_items.detach(), rtol=1e-5, atol=1e-5)
    total.backward()
    assert all(p.grad is not None for p in model.detect.m.parameters())


def test_leaky_relu_activation_reaches_every_conv_but_those_without_one():
    model = build_model(spec_from_yolov5_yaml(small({**YAMLS["yolov5s-ghost"], "activation": "nn.LeakyReLU(0.1)"}),
                                              None, "ghost"))
    assert model.spec.activation == "leaky_relu"
    acts = [type(m.act).__name__ for m in model.modules() if hasattr(m, "bn") and hasattr(m, "act")]
    assert set(acts) == {"LeakyReLU", "Identity"}  # Identity: the second GhostConv of each GhostBottleneck
    ghost = next(m for m in model.modules() if isinstance(m, GhostBottleneck))
    assert isinstance(ghost.conv[2].cv1.act, nn.Identity) and ghost.conv[0].cv1.act.negative_slope == 0.1


def test_ghost_and_transformer_models_run_and_keep_yolov5s_names():
    for name, expected in (("yolov5s-ghost", "model.2.m.0.conv.2.cv2.conv.weight"),
                           ("yolov5s-transformer", "model.8.m.tr.0.ma.in_proj_weight")):
        model = build_model(spec_from_yolov5_yaml(small(YAMLS[name]), None, name), num_classes=2).eval()
        assert expected in model.state_dict()
        with torch.no_grad():
            assert model.predict(torch.rand(1, 3, 64, 96)).shape == (1, 3 * (8 * 12 + 4 * 6 + 2 * 3), 7)


def test_yolov3_bottleneck_rows_repeat_as_yolov5_names_them():
    names = build_model(spec_from_yolov5_yaml(small(YAMLS["yolov3"], 1.0), None, "yolov3")).state_dict()
    assert "model.2.cv1.conv.weight" in names  # number 1: the block itself
    assert "model.4.1.cv2.conv.weight" in names and "model.4.2.cv1.conv.weight" not in names  # number 2: Sequential


def test_anchors_as_a_number_build_placeholders_that_autoanchor_replaces():
    spec = spec_from_yolov5_yaml(small(p7()), None, "p7")
    assert spec.anchors == 3 and spec.mapping["anchors"] == 3
    model = build_model(spec)
    assert model.detect.anchors.shape == (5, 3, 2)


def rows(**edits) -> dict:
    """yolov5s with some rows replaced: {index: row}."""
    mapping = p5("s")
    layers = mapping["backbone"] + mapping["head"]
    for index, row in edits.items():
        layers[int(index.removeprefix("at"))] = row
    return {**mapping, "backbone": layers[:10], "head": layers[10:]}


@pytest.mark.parametrize("mapping, message", [
    (rows(at1=[-1, 1, "Conv"]), "backbone[1]: a yolov5 layer must be a list [from, number, module, args], got"),
    (rows(at1=[-1, 1, "C2f", [128]]), "backbone[1]: module 'C2f' is not one detect builds (Conv, Focus"),
    (rows(at1=[-1, 1, ["Conv"], [128]]), "backbone[1]: module ['Conv'] is not one detect builds (Conv, Focus"),
    (rows(at1=[-1, 1, "Conv", [128, "3", 2]]), "backbone[1] (Conv): key 'kernel' must be int, got str '3'"),
    (rows(at1=[-1, 1, "Conv", [128, 3, 2, None, 1, 1]]),
     "backbone[1] (Conv): args must be a list of at most 4 [channels, kernel, stride, padding], got [128, 3, 2"),
    (rows(at1=[-1, 2, "Conv", [128, 3, 2]]), "backbone[1] (Conv): number 2: detect repeats only C3, C3Ghost"),
    (rows(at2=[-1, "3", "C3", [128]]), "backbone[2] (C3): number must be an int >= 1, got '3'"),
    (rows(at12=[[-1, 6], 1, "Concat", [0]]), "head[2] (Concat): detect concatenates along channels only"),
    (rows(at11=[-1, 1, "nn.Upsample", [None, 2, "bilinear"]]), "head[1] (Upsample): detect builds Upsample [None, "),
    (rows(at12=[[-1, "6"], 1, "Concat", [1]]), "head[2]: key 'from' must be an int or a list of ints, got [-1, '6']"),
    ({**p5("s"), "head": "[...]"}, "key 'head' must be a list of [from, number, module, args] rows, got str"),
    ({**p5("s"), "anchors": [[10, 13]]}, "key 'anchors' needs one list of (w, h) pairs per Detect input (3)"),
    ({**p5("s"), "anchors": 0}, "key 'anchors' as a number is the anchors per level, at least 1, got 0"),
    ({**p5("s"), "activation": "nn.Sigmoid()"}, "key 'activation' 'nn.Sigmoid()' is not one detect builds"),
    ({**p5("s"), "depth_multiple": "0.33"}, "key 'depth_multiple' must be float, got str '0.33'"),
    ({**p5("s"), "ch_mul": 8}, "unknown key 'ch_mul' (known in a yolov5 model yaml: nc, depth_multiple"),
])
def test_a_wrong_yolov5_yaml_names_the_layer_key_and_expected_type(tmp_path, mapping, message):
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(mapping))
    with pytest.raises(ConfigError) as error:
        load_model_spec(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)


@pytest.mark.parametrize("version", ["v6.0", "v7.0"])
def test_yolov5_p6_checkpoints_import_with_their_four_levels(tmp_path, version):
    # yolov5n6.pt as train.py writes it (the P6 family exists from v6.0 on), through weights.py's yolov5 path.
    path = tmp_path / "yolov5n6.pt"
    reference = standin_checkpoint(path, version, hub="yolov5n6", stripped=True)
    model = load_model(path)
    assert model.detect.level_strides == (8, 16, 32, 64) and model.max_stride == 64
    torch.testing.assert_close(model.detect.anchors[3, 2] * 64, torch.tensor([925.0, 792.0]))
    images = torch.rand(1, 3, 128, 192)
    with torch.no_grad():
        torch.testing.assert_close(model.predict(images), reference.predict(images), rtol=0, atol=0)


@pytest.mark.parametrize("hub", ["yolov5s-ghost", "yolov5s-transformer", "yolov5s-LeakyReLU", "yolov3-tiny",
                                 "yolov5-p34"])
def test_checkpoints_of_yolov5s_hub_yamls_import(tmp_path, hub):
    # yolov5-p34's stored yaml says `anchors: 3`: the anchors come from the checkpoint's Detect buffer.
    path = tmp_path / f"{hub}.pt"
    reference = standin_checkpoint(path, "v7.0", hub=hub)
    model = load_model(path)
    torch.testing.assert_close(model.detect.anchors, reference.detect.anchors, rtol=0, atol=0)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())
    images = torch.rand(1, 3, 64, 96)
    with torch.no_grad():
        torch.testing.assert_close(model.predict(images), reference.predict(images), rtol=0, atol=0)


def test_the_models_cli_summarises_yolov5s_own_yaml(tmp_path, capsys):
    # Issue 27's failing command: python -m detect.models --cfg yolov5/models/yolov5s.yaml
    from detect.models.__main__ import main

    path = tmp_path / "yolov5" / "models" / "yolov5s.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(YAMLS["yolov5s"]))
    assert main(["--cfg", str(path)]) == 0
    assert "7,235,389 parameters" in capsys.readouterr().out
