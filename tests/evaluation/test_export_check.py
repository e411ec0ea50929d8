"""`detect.export --check`: the .pt and every written file scored alike, one table; a file that cannot run here
gets its reason in its row."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from detect import export
from tests import ais_bench_standin
from tests.data.helpers import write_sample, write_yaml
from tests.exporters.helpers import tiny_weights


def test_check_scores_each_format_beside_the_pt(tmp_path, monkeypatch, caplog):
    root = tmp_path / "data"
    for index in range(4):
        write_sample(root, "train", f"im{index}", 96, 128, [(10, 10, 60, 50), (70, 20, 120, 90)])
    data = write_yaml(root)
    weights = tiny_weights(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ais_bench_standin.fake_atc(bin_dir)  # an .om that this CPU machine cannot run
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}")
    with caplog.at_level("INFO"):
        written = export.run(weights=str(weights), include=["torchscript", "onnx", "om"], soc_version="Ascend310P3",
                             imgsz=[128], batch_size=2, check=True, data=str(data), output_dir=str(tmp_path / "out"))
    assert set(written) == {"torchscript", "onnx", "om"}
    table = caplog.text[caplog.text.index("format "):].splitlines()
    rows = {line.split()[0]: line.split() for line in table[1:5]}
    assert set(rows) == {"pytorch", "torchscript", "onnx", "om"}
    assert float(rows["pytorch"][2]) > 0  # the untrained model finds some boxes, so equal rows say something
    for kind in ("torchscript", "onnx"):  # the same network on the same square inputs: the same mAP
        assert float(rows[kind][2]) == pytest.approx(float(rows["pytorch"][2]), abs=2e-4)
        assert rows[kind][4] in ("+0.0000", "-0.0000", "+0.0001", "-0.0001", "+0.0002", "-0.0002")
    assert rows["om"][2] == "-" and "runs on an Ascend NPU only" in " ".join(rows["om"])


@pytest.mark.parametrize("options", [["--check"], ["--check", "--cfg", "yolov5n.yaml", "--data", "coco128.yaml"]])
def test_check_needs_weights_and_data(options, capsys):
    assert export.main(options) == 2
    assert "--check scores --weights on --data's val split" in capsys.readouterr().err
