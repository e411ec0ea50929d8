"""scripts/bench_serve.py without the real server: its arguments, its percentiles (numpy's), the model alone on a
tiny ONNX, and a whole run against a stand-in server it starts, waits for, loads and stops."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.scripts.modules import script

STANDIN = Path(__file__).with_name("serve_standin.py")


def image_folder(folder):
    """Two JPEGs and a PNG of 8x8 pixels."""
    folder.mkdir()
    pixels = np.random.default_rng(0).integers(0, 255, (8, 8, 3), dtype=np.uint8)
    for name in ("a.jpg", "b.jpg", "c.png"):
        assert cv2.imwrite(str(folder / name), pixels)
    (folder / "notes.txt").write_text("not an image")
    return folder


def tiny_onnx(path: Path, batch: int | str) -> Path:
    """A one-node ONNX (global average pooling) of input `images` (batch, 3, 32, 48): batch an int, or a name for a
    dynamic one."""
    graph = helper.make_graph([helper.make_node("GlobalAveragePool", ["images"], ["pooled"])], "tiny",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, 32, 48])],
                              [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [batch, 3, 1, 1])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_percentiles_are_numpys_linear_ones():
    bench = script("bench_serve")
    values = list(np.random.default_rng(1).exponential(100, 37))
    for q in (0, 50, 90, 99, 100):
        assert bench.percentile(values, q) == pytest.approx(np.percentile(values, q))
    assert bench.percentile([7.0], 99) == 7.0 and bench.percentile([1.0, 2.0], 50) == 1.5
    with pytest.raises(ValueError, match="no values"):
        bench.percentile([], 50)


def test_arguments_and_their_refusals(capsys):
    bench = script("bench_serve")
    args = bench.parse_args(["--serve", "a --max-batch 1", "--serve", "a --max-batch 8", "--batch", "1", "8"])
    assert (args.requests, args.concurrency, args.warmup, args.url) == (240, 16, 16, "http://127.0.0.1:8000")
    assert args.serve == ["a --max-batch 1", "a --max-batch 8"] and args.batch == [1, 8] and not args.model_only
    for wrong, why in ((["--model-only"], "give --onnx"), (["--concurrency", "0"], "not a positive integer"),
                       (["--threads", "-1"], "a count of threads")):
        with pytest.raises(SystemExit) as stopped:
            bench.parse_args(wrong)
        assert stopped.value.code == 2 and why in capsys.readouterr().err


def test_the_model_alone_runs_letterboxed_batches_and_refuses_another_static_batch(tmp_path):
    bench = script("bench_serve")
    uploads = bench.read_uploads(image_folder(tmp_path / "images"))
    assert [upload.content_type for upload in uploads] == ["image/jpeg", "image/jpeg", "image/png"]
    dynamic, static = tiny_onnx(tmp_path / "dynamic.onnx", "batch"), tiny_onnx(tmp_path / "static.onnx", 1)
    assert bench.model_alone(dynamic, uploads, batch=2, images=5, imgsz=640) > 0  # 32x48 from the graph, not 640
    assert bench.model_alone(static, uploads, batch=1, images=3, imgsz=640) > 0
    assert bench.model_alone(dynamic, uploads, batch=2, images=3, imgsz=640, threads=1) > 0
    with pytest.raises(SystemExit, match="static.onnx takes batches of 1 only, not --batch 2"):
        bench.model_alone(static, uploads, batch=2, images=3, imgsz=640)


def test_a_run_starts_the_server_loads_it_counts_failures_and_stops_it(tmp_path, capsys):
    bench = script("bench_serve")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = f"{sys.executable} {STANDIN} {port} secret"
    arguments = ["--images", str(image_folder(tmp_path / "images")), "--url", url, "--requests", "12",
                 "--concurrency", "3", "--api-key", "secret", "--serve", command]
    assert bench.main(arguments) == 1  # the PNGs are refused: a failed request is exit status 1
    out = capsys.readouterr().out
    assert "CPU: " in out and "3 images in" in out and "12 requests a server at concurrency 3 (after 3 untimed)" in out
    row = next(line for line in out.splitlines() if line.startswith(command))
    assert "8/12" in row and row.endswith("HTTP 503 x4; exit 0")
    p50, p90, p99 = (float(cell) for cell in row[len(command):].split()[2:5])
    assert 0 < p50 <= p90 <= p99
    with subprocess.Popen(command.split()) as running:  # something already answers there: refused, not measured
        try:
            while bench.health_status(url) is None:
                time.sleep(0.05)
            with pytest.raises(SystemExit, match="already answers"):
                bench.main(arguments)
        finally:
            running.terminate()
    with pytest.raises(SystemExit, match="no healthy server at"):
        bench.main(arguments[:-2])
