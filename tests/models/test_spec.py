"""Bad model yamls end in one clear error that names the file and the key."""

import pytest
import yaml

from detect.config import CONFIGS_DIR
from detect.errors import ConfigError
from detect.models import build_model


def write_variant(tmp_path, edit):
    data = yaml.safe_load((CONFIGS_DIR / "models" / "yolov5n.yaml").read_text())
    edit(data)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["backbone"][2].update(module="C4"), "backbone[2]: key 'module' must be one of"),
    (lambda d: d["head"][3].update(chanels=5), "head[3] (C3): unknown key 'chanels'"),
    (lambda d: d["backbone"][0].pop("channels"), "backbone[0] (Conv): missing key 'channels'"),
    (lambda d: d["backbone"][1].update(kernel="3"), "backbone[1] (Conv): key 'kernel' must be int"),
    (lambda d: d.pop("anchors"), "missing key 'anchors'"),
    (lambda d: d.update(width_multiple="wide"), "key 'width_multiple' must be float"),
    (lambda d: d.update(depth=1), "unknown key 'depth'"),
    (lambda d: d["head"][2].update({"from": [-1, 30]}), "layer 12 key 'from' [-1, 30] must name earlier layers"),
    (lambda d: d["head"].pop(), "must end with a Detect layer"),
    (lambda d: d["backbone"].__setitem__(2, {"module": "BottleneckCSP", "channels": 128, "activation": "relu"}),
     "backbone[2] (BottleneckCSP): key 'activation' must be silu or leaky_relu, got 'relu'"),
    (lambda d: d["backbone"].__setitem__(9, {"module": "SPP", "channels": 1024, "kernels": [5, "9"]}),
     "backbone[9] (SPP): key 'kernels' must be"),
    (lambda d: d["backbone"].__setitem__(1, {"module": "ZeroPad2d", "padding": [0, 1]}),
     "backbone[1] (ZeroPad2d): key 'padding' must be 4 ints (left, right, top, bottom), got [0, 1]"),
    (lambda d: d["backbone"].__setitem__(1, {"module": "GhostConv", "channels": 128, "groups": 2}),
     "backbone[1] (GhostConv): unknown key 'groups'"),
    (lambda d: d["backbone"].__setitem__(1, {"module": "MaxPool2d", "stride": 2}),
     "backbone[1] (MaxPool2d): missing key 'kernel'"),
    (lambda d: d.update(activation="swish"), "key 'activation' must be one of silu, leaky_relu, relu"),
    (lambda d: d.update(anchors=[[10, 13], [30, 61]]), "key 'anchors' needs one list of (w, h) pairs per Detect input (3)"),
    (lambda d: d.update(anchors="three"), "key 'anchors' must be list[list[float]] | int, got str 'three'"),
    (lambda d: d["head"][-1].update({"from": [17, 20, 23, 17, 20, 23]}), "Detect reads 6 levels; at most 5 (P3-P7)"),
])
def test_bad_yaml_names_file_and_key(tmp_path, edit, message):
    path = write_variant(tmp_path, edit)
    with pytest.raises(ConfigError) as error:
        build_model(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_bare_name_resolves_to_configs_and_path_is_a_path(tmp_path):
    assert build_model("yolov5n").spec.source.endswith("configs/models/yolov5n.yaml")
    path = write_variant(tmp_path, lambda d: d.update(nc=4))
    assert build_model(path).nc == 4
    with pytest.raises(ConfigError, match="not one of configs/models/"):
        build_model("yolov5q.yaml")


def test_cli_prints_the_summary(capsys):
    from detect.models.__main__ import main
    assert main(["--cfg", "yolov5n.yaml"]) == 0
    assert "1,872,157 parameters" in capsys.readouterr().out
    assert main(["--cfg", "missing.yaml"]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_our_schema_takes_the_hub_blocks_activation_and_a_number_of_anchors(tmp_path):
    def edit(data):
        data.update(anchors=3, activation="leaky_relu")
        data["backbone"][1] = {"module": "GhostConv", "channels": 128, "kernel": 3, "stride": 2}
        data["backbone"][2] = {"module": "C3Ghost", "channels": 128, "repeat": 3}
        data["backbone"][8] = {"module": "C3TR", "channels": 1024, "repeat": 3}
    model = build_model(write_variant(tmp_path, edit))
    assert type(model.model[1]).__name__ == "GhostConv" and type(model.model[8].m).__name__ == "TransformerBlock"
    assert type(model.model[0].act).__name__ == "LeakyReLU" and model.detect.anchors.shape == (3, 3, 2)
