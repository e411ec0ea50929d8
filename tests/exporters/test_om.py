"""The Ascend .om exporter through CANN's atc (a fake one here): the command, no atc, a failing atc."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import onnx

from detect import export
from tests.exporters.helpers import IMGSZ, run_export
from tests.npu_standin import install


def fake_atc(folder: Path, exit_code: int = 0) -> Path:
    """An `atc` that records its arguments (one per line) and, when it succeeds, writes <--output>.om."""
    record = folder / "atc_args.txt"
    script = folder / "atc"
    script.write_text(f"""#!{sys.executable}
import sys
from pathlib import Path
Path({str(record)!r}).write_text("\\n".join(sys.argv[1:]))
if {exit_code}:
    print("E19999: Inner Error, the soc version is not supported", file=sys.stderr)
    sys.exit({exit_code})
output = next(arg.split("=", 1)[1] for arg in sys.argv[1:] if arg.startswith("--output="))
Path(output + ".om").write_bytes(b"om")
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return record


def test_om_runs_atc_with_a_static_shape_for_the_chosen_chip(weights, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = fake_atc(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}")
    written = run_export(weights, tmp_path / "out", "--include", "om", "--soc-version", "Ascend310P3",
                         "--batch-size", "2")
    onnx_path = tmp_path / "out" / "tiny.onnx"
    assert written == {"onnx": onnx_path, "om": tmp_path / "out" / "tiny.om"}
    model, framework, output, *rest = record.read_text().splitlines()
    assert [model, framework, *rest] == [
        f"--model={onnx_path}", "--framework=5", "--soc_version=Ascend310P3",
        f"--input_shape=images:2,3,{IMGSZ[0]},{IMGSZ[1]}", "--input_format=NCHW", "--log=error"]
    # atc writes <output>.om: a hidden temporary beside tiny.om, renamed over it once whole (atomic_file)
    assert output.startswith(f"--output={tmp_path / 'out' / '.tiny.om.'}") and output.endswith(".tmp")
    assert (tmp_path / "out" / "tiny.om").read_bytes() == b"om" and not list((tmp_path / "out").glob(".*"))
    assert [d.dim_value for d in onnx.load(str(onnx_path)).graph.input[0].type.tensor_type.shape.dim] == [2, 3, *IMGSZ]


def test_om_without_atc_writes_the_onnx_and_prints_the_command(weights, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with caplog.at_level("WARNING"):
        written = run_export(weights, tmp_path, "--include", "om", "--soc-version", "Ascend910B3")
    assert written == {"onnx": tmp_path / "tiny.onnx"} and not (tmp_path / "tiny.om").exists()
    assert "atc (CANN's model converter) is not on PATH" in caplog.text
    assert f"atc --model={tmp_path / 'tiny.onnx'} --framework=5" in caplog.text
    assert "--soc_version=Ascend910B3" in caplog.text


def test_a_failing_atc_is_one_line_and_exit_2(weights, tmp_path, monkeypatch, capsys):
    fake_atc(tmp_path, exit_code=1)
    monkeypatch.setenv("PATH", f"{tmp_path}:{Path(sys.executable).parent}")
    code = export.main(["--weights", str(weights), "--imgsz", "64", "--include", "om", "--soc-version", "Ascend999",
                        "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "atc failed with exit code 1: E19999: Inner Error" in err and len(err.splitlines()) == 1


def test_the_chip_is_read_from_the_npu_when_not_given(weights, tmp_path, monkeypatch, caplog):
    """No --soc-version: the chip this machine's NPU reports (an Atlas 800T A2 may hold 910B2 cards), not a default."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = fake_atc(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}")
    install(monkeypatch).chip = "Ascend910B2"
    with caplog.at_level("INFO"):
        written = run_export(weights, tmp_path / "out", "--include", "om")
    assert "--soc_version=Ascend910B2" in record.read_text().splitlines()
    assert '"soc_version": "Ascend910B2"' in (tmp_path / "out" / "tiny.om.json").read_text() and "om" in written
    assert "om: for Ascend910B2 (this machine's NPU; --soc-version for another chip)" in caplog.text
