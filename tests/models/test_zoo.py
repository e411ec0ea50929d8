"""The model zoo against the published facts (docs/yolov5.md, "Parameter counts and FLOPs"), generated over
configs/models."""

import pytest
import torch

from detect.config import CONFIGS_DIR
from detect.models import PredictModule, build_model, summarize

CONFIGS = sorted((CONFIGS_DIR / "models").glob("yolov5*.yaml"))
# name -> (exact parameters at nc=80, published GFLOPs at 640: unfused for P5 (docs/yolov5.md), BN fused for P6
# (yolov5's README table: 4.6 / 16.8 / 50.0 / 111.4 / 209.8)
PUBLISHED = {"yolov5n": (1_872_157, 4.6), "yolov5s": (7_235_389, 16.6), "yolov5m": (21_190_557, 49.2),
             "yolov5l": (46_563_709, 109.6), "yolov5x": (86_749_405, 206.3),
             "yolov5n6": (3_246_940, 4.6), "yolov5s6": (12_626_620, 16.8), "yolov5m6": (35_731_932, 50.0),
             "yolov5l6": (76_770_172, 111.4), "yolov5x6": (140_794_780, 209.8)}


def test_every_published_model_has_a_config():
    assert sorted(p.stem for p in CONFIGS) == sorted(PUBLISHED)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_parameters_and_gflops_match_the_reference(path):
    parameters, gflops = PUBLISHED[path.stem]
    model = build_model(path.name)
    assert summarize(model).parameters == parameters
    fused = path.stem.endswith("6")
    assert summarize(model.fuse() if fused else model).gflops == pytest.approx(gflops, rel=0.02)


def test_p6_configs_have_four_levels_up_to_stride_64():
    model = build_model("yolov5s6.yaml")
    assert model.detect.level_strides == (8, 16, 32, 64) and model.max_stride == 64
    # yolov5's P6 anchors, in grid units of each level
    torch.testing.assert_close(model.detect.anchors[3, 2] * 64, torch.tensor([925.0, 792.0]))


def test_class_count_override_changes_only_the_head():
    model = build_model("yolov5n.yaml", num_classes=3)
    assert model.nc == 3 and len(model.names) == 3
    assert model.detect.m[0].out_channels == 3 * (3 + 5)
    assert all(a.shape == b.shape for a, b in zip(model.model[:24].parameters(),
                                                     build_model("yolov5n.yaml").model[:24].parameters()))


def test_parameter_names_follow_the_layer_index():
    names = list(build_model("yolov5n.yaml").state_dict())
    assert names[0] == "model.0.conv.weight"
    assert "model.2.m.0.cv1.conv.weight" in names and "model.24.m.2.bias" in names
    assert "model.24.anchors" in names


@pytest.mark.parametrize("imgsz", [320, 640])
@pytest.mark.parametrize("batch", [1, 3])
def test_forward_is_raw_in_both_modes_and_predict_decodes(imgsz, batch):
    model = build_model("yolov5n.yaml", num_classes=7)
    images = torch.rand(batch, 3, imgsz, imgsz)
    levels = [(batch, 3, imgsz // s, imgsz // s, 12) for s in (8, 16, 32)]
    assert [tuple(r.shape) for r in model.train()(images)] == levels
    with torch.no_grad():
        raw = model.eval()(images)
        decoded = model.predict(images)
    assert [tuple(r.shape) for r in raw] == levels and all(r.is_contiguous() for r in raw)
    cells = sum(3 * (imgsz // s) ** 2 for s in (8, 16, 32))
    assert decoded.shape == (batch, cells, 12)
    # predict is the head's decode of exactly the raw outputs forward returns
    torch.testing.assert_close(decoded, model.detect.decode(raw))


def test_rectangular_input():
    with torch.no_grad():
        decoded = build_model("yolov5n.yaml").eval().predict(torch.rand(2, 3, 256, 416))
    assert decoded.shape == (2, 3 * (32 * 52 + 16 * 26 + 8 * 13), 85)


def test_predict_module_is_predict():
    model = build_model("yolov5n.yaml", num_classes=2).eval()
    images = torch.rand(1, 3, 128, 96)
    with torch.no_grad():
        torch.testing.assert_close(PredictModule(model)(images), model.predict(images))


def test_fused_model_gives_the_same_output():
    torch.manual_seed(0)
    model = build_model("yolov5n.yaml").eval()
    for module in model.modules():  # non-trivial BatchNorm statistics, or fusing proves nothing
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.5, 0.5)
    images = torch.rand(2, 3, 320, 320)
    with torch.no_grad():
        expected = model.predict(images)
        fused = model.fuse().predict(images)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    torch.testing.assert_close(fused, expected, atol=1e-4, rtol=1e-4)
