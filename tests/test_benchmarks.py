"""`python -m detect.benchmarks`, yolov5's benchmarks.py: every format exported, scored and timed in one table; a
format this host cannot run, or one that fails, is a row with its reason."""

from __future__ import annotations

import logging

import pytest
import torch

from detect import benchmarks
from detect.data import load_data_config
from detect.models import build_model
from detect.models.safe_io import save_checkpoint
from detect.models.weights import weights_payload


@pytest.fixture(scope="module")
def shapes_weights(tmp_path_factory):
    """An untrained yolov5n for the built-in shapes.yaml's five classes, whose BatchNorm statistics make it find a few
    shapes at 128 px (mAP50-95 about 0.0004), so that equal rows say something."""
    torch.manual_seed(0)
    model = build_model("yolov5n.yaml", num_classes=5, names=list(load_data_config("shapes.yaml").names))
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 2.0)
    return save_checkpoint(tmp_path_factory.mktemp("weights") / "tiny.pt", weights_payload(model))


def table_rows(caplog) -> dict[str, list[str]]:
    table = caplog.text[caplog.text.index("format "):].splitlines()
    return {line.split()[0]: line.split() for line in table[1:] if line.split()[0] in benchmarks.FORMATS}


@pytest.mark.slow  # 100 s on 2 CPU cores: four formats score the 100 val images at 128 px
def test_the_tutorials_command_gives_a_row_per_format(shapes_weights, caplog):
    # yolov5's `python benchmarks.py --weights yolov5s.pt --imgsz 640 --device cpu`, a tiny model at 128 px
    with caplog.at_level(logging.INFO, logger="detect"):
        assert benchmarks.main(["--weights", str(shapes_weights), "--imgsz", "128", "--device", "cpu"]) == 0
    rows = table_rows(caplog)
    assert list(rows) == list(benchmarks.FORMATS) and float(rows["pytorch"][3]) > 0
    for kind in ("torchscript", "onnx", "openvino"):  # the same network on the same inputs: the same mAP, to
        # the table's 4 decimals (a value near a rounding edge may print one unit off: 0.0015 against 0.0016)
        assert float(rows[kind][3]) == pytest.approx(float(rows["pytorch"][3]), abs=1.5e-4), kind
        assert float(rows[kind][1]) > 0.5 and float(rows[kind][5]) > 0  # MB written, ms per image timed
    assert rows["om"][2] == "-" and "runs on an Ascend NPU only" in " ".join(rows["om"])
    assert (shapes_weights.parent / "tiny.onnx").is_file()  # beside the weights, as yolov5 writes them


def test_a_format_that_fails_is_a_row_and_hard_fail_stops(shapes_weights, tmp_path, monkeypatch, caplog, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("converter crashed\nits traceback")

    monkeypatch.setattr("detect.exporters.formats.export_openvino", broken)
    argv = ["--weights", str(shapes_weights), "--imgsz", "64", "--device", "cpu", "--output-dir", str(tmp_path)]
    with caplog.at_level(logging.INFO, logger="detect"):
        assert benchmarks.main([*argv, "--test", "--hard-fail"]) == 2
    assert capsys.readouterr().err.strip().endswith("--hard-fail: openvino failed: RuntimeError: converter crashed")
    rows = table_rows(caplog)  # the table comes first
    assert list(rows) == list(benchmarks.FORMATS)
    assert " ".join(rows["openvino"]).endswith("tiny.pt: failed: RuntimeError: converter crashed")
    assert " ".join(rows["onnx"]).endswith("tiny.onnx: exported, not scored (--test)")
    assert benchmarks.main([*argv, "--pt-only", "--hard-fail", "0.5"]) == 2  # an untrained model's mAP is under it
    assert "--hard-fail 0.5: pytorch's mAP50-95 0.0" in capsys.readouterr().err
