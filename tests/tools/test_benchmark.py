"""python -m detect.tools.benchmark: the JSON holds every field, the table is printed, --compare prints ratios."""

from __future__ import annotations

import contextlib
import copy
import io
import json

import pytest
import torch

from detect.tools import benchmark

TINY = ["--cfg", "yolov5n.yaml", "--nc", "2", "--device", "cpu", "--imgsz", "64", "--batch-size", "2",
        "--warmup", "0", "--steps", "1", "--train-images", "1000", "--val-images", "100"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One tiny benchmark run: (its JSON document, what it printed)."""
    path = tmp_path_factory.mktemp("bench") / "cpu.json"
    printed = io.StringIO()  # capsys is per test; this run is shared by the module
    with contextlib.redirect_stdout(printed):
        assert benchmark.main([*TINY, "--json", str(path)]) == 0
    return json.loads(path.read_text()), printed.getvalue()


def test_the_json_has_every_field(measured):
    result, _ = measured
    assert set(result) == {*benchmark.FIELDS, "cpu"} and result["cpu"].startswith("CPU: ")  # cpu: not in old files
    assert (result["device"], result["imgsz"], result["batch_size"], result["model"]) == ("cpu", 64, 2, "yolov5n.yaml")
    assert result["parameters"] > 1_000_000 and result["versions"]["torch"]
    configs = [(row["config"], row["mode"], row["precision"]) for row in result["rows"]]
    assert configs == [("train fp32", "train", "fp32"), ("train amp", "train", "bf16"),
                       ("inference fp32", "inference", "fp32"), ("inference amp", "inference", "bf16")]
    for row in result["rows"]:
        assert set(row) == set(benchmark.ROW_FIELDS)
        assert row["img_per_s"] > 0 and row["memory_gb"] > 0
        images = 1000 if row["mode"] == "train" else 100
        assert row["epoch_seconds"] == pytest.approx(images / row["img_per_s"])


def test_the_table_is_printed(measured):
    _, printed = measured
    lines = printed.splitlines()
    assert lines[1].startswith("CPU: ") and " cores; has " in lines[1]  # the model and its flags (avx512, amx, ...)
    assert lines[2] == "| config | throughput img/s | memory GB | time |"
    assert [line.split("|")[1].strip() for line in lines[4:8]] == [
        "train fp32", "train amp (bf16)", "inference fp32", "inference amp (bf16)"]
    assert lines[4].endswith("per epoch of 1000 images |") and lines[6].endswith("per val pass of 100 images |")


def test_compare_prints_ratios(measured, tmp_path, capsys):
    first, _ = measured
    second = copy.deepcopy(first)
    second.update(device="npu:0", device_name="Ascend910B3")
    for row in second["rows"]:
        row["img_per_s"] *= 4
        row["memory_gb"] *= 0.5
        row["precision"] = "fp32" if row["precision"] == "fp32" else "fp16"
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, result in zip(paths, (first, second)):
        path.write_text(json.dumps(result))
    assert benchmark.main(["--compare", *map(str, paths)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"A: cpu ({first['device_name']})  B: npu:0 (Ascend910B3)"
    rows = [line.split("|")[1:-1] for line in lines[3:]]
    assert [cells[0].strip() for cells in rows] == ["train fp32", "train amp (bf16 vs fp16)", "inference fp32",
                                                    "inference amp (bf16 vs fp16)"]
    assert all(cells[3].strip() == "4.00x" and cells[6].strip() == "0.50x" for cells in rows)


def test_compare_notes_a_different_workload(measured, tmp_path, capsys):
    first, _ = measured
    second = {**first, "imgsz": 640}
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, result in zip(paths, (first, second)):
        path.write_text(json.dumps(result))
    assert benchmark.main(["--compare", *map(str, paths)]) == 0
    assert "note: not the same workload (model yolov5n.yaml vs yolov5n.yaml, imgsz 64 vs 640" in capsys.readouterr().out


def test_compare_refuses_a_file_that_is_not_a_result(measured, tmp_path, capsys):
    first, _ = measured
    broken = copy.deepcopy(first)
    del broken["rows"][0]["img_per_s"]
    (tmp_path / "a.json").write_text(json.dumps(first))
    (tmp_path / "b.json").write_text(json.dumps(broken))
    assert benchmark.main(["--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {tmp_path / 'b.json'}: not a benchmark result of this tool (missing rows[].img_per_s)"]


def test_fp16_and_bf16_are_measured_by_name_on_the_npu(monkeypatch, tmp_path, capsys):
    """--precisions fp16 bf16 on the NPU stand-in (its tensors on the CPU, every op checked as torch_npu would): the
    rows npu_check.sh reads for the 910B's fp16 and bf16 training rates."""
    from detect.backend import npu
    from tests.npu_standin import install

    install(monkeypatch)
    original = npu.NpuBackend.__init__
    monkeypatch.setattr(npu.NpuBackend, "__init__", lambda self, index=0, **options: original(
        self, index, device=torch.device("cpu"), **options))
    options = [*TINY, "--device", "npu:0", "--precisions", "fp16", "bf16", "--json", str(tmp_path / "npu.json")]
    assert benchmark.main(options) == 0
    rows = json.loads((tmp_path / "npu.json").read_text())["rows"]
    assert [(row["config"], row["precision"]) for row in rows] == [
        ("train fp16", "fp16"), ("train bf16", "bf16"), ("inference fp16", "fp16"), ("inference bf16", "bf16")]
    assert "| train bf16 |" in capsys.readouterr().out
