"""Milliseconds of the training loss's forward + backward, fixed shapes against matched candidates only.

    python scripts/bench_loss.py --data coco128.yaml --cfg yolov5n.yaml --imgsz 320 --batch-size 16

The head outputs of a freshly built model for real mosaic batches of the data (made once, no grad), then the loss of
each mode over the same batches, alternating for --rounds rounds: every padded candidate scored under its mask (the
mode NPUs and GPUs run) and the matched ones alone (DetectionLoss.matched_only, the CPU's). Also prints the share of
candidates that match. Runs with OMP_WAIT_POLICY=PASSIVE unless you export another value, as our CLIs do.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from detect import backend as backends
from detect.backend.cpu import cpu_description
from detect.config import load_hyp
from detect.data import AugmentSettings, TrainLoaderSettings, build_train_loader, load_data_config, load_split
from detect.data.device_batch import to_device_batch
from detect.models import build_model
from detect.training.loss import DetectionLoss, LossSettings


def seconds_per_batch(loss: DetectionLoss, outputs: list[list[torch.Tensor]], targets: list[torch.Tensor]) -> float:
    """Mean wall seconds of loss forward + backward over the batches."""
    started = time.perf_counter()
    for raw, padded in zip(outputs, targets):
        raw = [level.clone().requires_grad_() for level in raw]
        loss(raw, padded)[0].backward()
    return (time.perf_counter() - started) / len(outputs)


def main() -> None:
    if "OMP_WAIT_POLICY" not in os.environ:  # read when torch loads, so start again with it (detect/__init__.py)
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="coco128.yaml")
    parser.add_argument("--cfg", default="yolov5n.yaml")
    parser.add_argument("--hyp", default="scratch-low.yaml")
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(cpu_description())  # what the figures were measured on (docs/benchmarks.md)

    backend = backends.select("cpu", amp=False)
    backend.seed(0)
    hyp, data = load_hyp(args.hyp), load_data_config(args.data)
    loader = build_train_loader(load_split(data, "train"),
                                TrainLoaderSettings(AugmentSettings.from_hyp(hyp), args.imgsz, args.batch_size, 0,
                                                    seed=0, pin_memory=False))
    model = build_model(args.cfg, num_classes=len(data.names)).to(memory_format=torch.channels_last)
    batches = [to_device_batch(batch, backend) for _, batch in zip(range(args.batches), loader)]
    with torch.no_grad():
        outputs = [[level.detach() for level in model(batch.images)] for batch in batches]
    targets = [batch.padded_targets for batch in batches]
    settings = LossSettings.from_hyp(hyp, model.detect.nl, model.nc, args.imgsz)
    losses = {mode: DetectionLoss(settings, model.detect.anchors, model.nc, matched_only=mode == "matched only")
              for mode in ("fixed shapes", "matched only")}
    times: dict[str, list[float]] = {mode: [] for mode in losses}
    for mode, loss in losses.items():  # warm-up
        seconds_per_batch(loss, outputs[:1], targets[:1])
    for _ in range(args.rounds):
        for mode, loss in losses.items():
            times[mode].append(seconds_per_batch(loss, outputs, targets))
    loss = losses["fixed shapes"]
    matched = candidates = 0
    for raw, padded in zip(outputs, targets):
        for level, output in enumerate(raw):
            mask, _, _ = loss._candidates(padded, loss.anchors[level].float(), *output.shape[2:4])
            matched, candidates = matched + int(mask.sum()), candidates + mask.numel()
    print(f"{args.cfg} at {args.imgsz}, batch {args.batch_size}, {args.batches} batches of {args.data}, "
          f"{torch.get_num_threads()} threads; candidates matching: {100 * matched / candidates:.1f}%")
    for mode, values in times.items():
        print(f"{mode:>12}: {1000 * statistics.median(values):6.1f} ms per batch, loss forward + backward "
              f"(rounds: {', '.join(f'{1000 * v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
