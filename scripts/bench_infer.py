"""Per-image latency on the CPU of one model in eager PyTorch (the inference path val and predict use: BatchNorm
fused, channels_last, freed memory kept; and the same without channels_last, to show what it brings), as its
TorchScript export and as its ONNX export in onnxruntime.

    python scripts/bench_infer.py [--weights weights/yolov5n.pt] [--imgsz 640] [--batch-size 1]
                                  [--rounds 5] [--iterations 10]

The decode is inside every measured forward (the exports carry it in their graph); NMS is not. The runtimes take
turns, round after round, so that a machine shared with other jobs slows them alike; each line gives the median
and the spread of the per-round medians. The exports go to a temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import onnxruntime
import torch

from detect import backend as backends
from detect.backend.cpu import cpu_description
from detect.exporters.onnx_export import export_onnx
from detect.exporters.torchscript import ExportSettings, export_metadata, export_torchscript, traced_module
from detect.inference.runtimes.torch_model import TorchInference
from detect.models.weights import load_model


def runtimes(weights: str, settings: ExportSettings, folder: Path) -> dict[str, Callable[[torch.Tensor], object]]:
    """name -> a callable that runs one batch, for eager PyTorch (channels_last and NCHW), TorchScript, onnxruntime."""
    module, example = traced_module(load_model(weights), settings, torch.device("cpu"))
    metadata = export_metadata(module.model, settings)
    traced = torch.jit.load(str(export_torchscript(module, example, metadata, folder / "model.torchscript")))
    session = onnxruntime.InferenceSession(str(export_onnx(module, example, metadata, settings, folder / "m.onnx")),
                                           providers=["CPUExecutionProvider"])
    eager = TorchInference(load_model(weights), backends.select("cpu"))
    nchw = TorchInference(load_model(weights), backends.select("cpu"))  # the same without channels_last
    nchw.memory_format, nchw.model = torch.contiguous_format, nchw.model.to(memory_format=torch.contiguous_format)

    def torchscript(images: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return traced(images)

    return {"eager PyTorch": eager, "eager, NCHW": nchw, "TorchScript": torchscript,
            "onnxruntime": lambda images: session.run(None, {"images": images.numpy()})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default="weights/yolov5n.pt")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10, help="timed batches per runtime and round")
    args = parser.parse_args()
    print(cpu_description())  # what the figures were measured on (docs/benchmarks.md)
    settings = ExportSettings(imgsz=(args.imgsz, args.imgsz), batch_size=args.batch_size)
    images = torch.rand(args.batch_size, 3, args.imgsz, args.imgsz, generator=torch.Generator().manual_seed(0))
    with tempfile.TemporaryDirectory() as folder:
        runs = runtimes(args.weights, settings, Path(folder))
        medians: dict[str, list[float]] = {name: [] for name in runs}
        for name, run in runs.items():  # warm-up: first-call allocations and kernel selection
            run(images)
        for _ in range(args.rounds):
            for name, run in runs.items():
                times = []
                for _ in range(args.iterations):
                    start = time.perf_counter()
                    run(images)
                    times.append(time.perf_counter() - start)
                medians[name].append(1000 * statistics.median(times) / args.batch_size)
    print(f"{args.weights} at {args.imgsz}, batch {args.batch_size}, {torch.get_num_threads()} threads, "
          f"{args.rounds} rounds of {args.iterations}")
    print(f"{'runtime':>16}{'ms/image':>10}{'min':>8}{'max':>8}")
    for name, values in medians.items():
        print(f"{name:>16}{statistics.median(values):>10.1f}{min(values):>8.1f}{max(values):>8.1f}")


if __name__ == "__main__":
    main()
