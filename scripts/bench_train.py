"""Training throughput in one process: the model-only step rate against the end-to-end rate.

model only:  forward + loss + backward + optimizer (every `accumulate` batches, as in training) on one fixed batch
already on the device, once the loader's workers have filled their prefetch and gone idle; end to end:  the trainer's
own train_one_epoch over the real loader (mosaic and the rest in CPU workers), with warmup, AMP where it applies,
gradient clipping and EMA, over --batches consecutive batches of the one stream of batches (across epochs where an epoch
is shorter), each round going on where the last stopped. The two alternate for --rounds rounds in one process, so the
ratio is fair on a shared machine (docs/benchmarks.md, "Measuring on shared CPUs"). A round starts with the workers'
prefetched batches (workers x 2) ready, made while the model-only round ran: that head start is why a round needs many
more batches than that. On coco128 (8 batches an epoch, 2 workers, 2026-12-04) rounds of 8 batches gave 0.96 and 0.97,
rounds of 32 gave 0.84 and 0.91. It runs with OMP_WAIT_POLICY=PASSIVE unless you export another value, as `python -m
detect.train` does.

    python scripts/bench_train.py --data coco128.yaml --cfg yolov5n.yaml --imgsz 320 --batch-size 16 --workers 2
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

from detect import backend as backends
from detect.backend.cpu import cpu_description
from detect.config import load_hyp
from detect.data import AugmentSettings, TrainLoaderSettings, build_train_loader, load_data_config, load_split
from detect.data.device_batch import to_device_batch
from detect.models import build_model
from detect.training.epoch import train_one_epoch
from detect.training.optim import IterationPlan, ModelEMA, OptimSettings, accumulate_steps
from detect.training.resume import Counters
from detect.training.step import StepRecipe, TrainingParts, backward, build_parts, forward_loss, optimizer_step


class StreamWindow:
    """The next `count` batches of the loader's stream from (epoch, batch), as train_one_epoch's loader: the stream
    is already there, so its workers go on without a restart."""

    def __init__(self, loader, epoch: int, batch: int, count: int) -> None:
        self.loader, self.epoch, self.batch, self.count = loader, epoch, batch, count

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.loader.set_epoch(epoch, start_batch)

    def __iter__(self):
        return itertools.islice(iter(self.loader), self.count)

    def __len__(self) -> int:
        return len(self.loader)


class StreamCursor:
    """Where the training stream stands, so that each end-to-end round takes the batches that come next."""

    def __init__(self, loader) -> None:
        self.loader, self.epoch, self.batch = loader, 0, 0

    def windows(self, batches: int):
        """Windows of at most one epoch each, `batches` batches in all, the cursor moved past them."""
        while batches > 0:
            count = min(batches, len(self.loader) - self.batch)
            yield StreamWindow(self.loader, self.epoch, self.batch, count)
            batches -= count
            self.epoch, self.batch = (self.epoch, self.batch + count) if self.batch + count < len(self.loader) else (
                self.epoch + 1, 0)


def wait_for_idle_workers(loader, interval: float = 0.2) -> None:
    """Return once the loader's workers use no more CPU (their prefetch is full), so that the model-only round has
    the cores to itself (their CPU time from Linux's /proc; elsewhere a fixed 2 s pause)."""
    stats = [Path(f"/proc/{pid}/stat") for pid in loader.worker_pids()]
    if not all(path.exists() for path in stats):
        time.sleep(2)
        return

    def ticks() -> int:  # user + system time: fields 14 and 15, after the parenthesised command name
        return sum(sum(map(int, path.read_text().rsplit(")", 1)[1].split()[11:13])) for path in stats)

    last = ticks()
    while True:
        time.sleep(interval)
        now = ticks()
        if now == last:
            return
        last = now


def model_only(parts: TrainingParts, backend: backends.Backend, batch, steps: int, accumulate: int) -> tuple[float,
                                                                                                             float]:
    """Images per second of forward + loss + backward (+ optimizer every `accumulate`) on one device batch, and the
    process's page faults per step (glibc re-faulting freed activations shows here: Backend.prepare_steps)."""
    device_batch = to_device_batch(batch, backend)
    backend.synchronize()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    started = time.perf_counter()
    for index in range(steps):
        backward(parts, forward_loss(parts, device_batch)[0])
        if (index + 1) % accumulate == 0:
            optimizer_step(parts)
    backend.synchronize()
    seconds = time.perf_counter() - started
    return steps * len(batch) / seconds, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps


def end_to_end(parts: TrainingParts, plan: IterationPlan, cursor: StreamCursor, batches: int) -> float:
    """Images per second of the trainer's epoch loop over the next `batches` batches of the real loader."""
    images = seconds = 0.0
    for window in cursor.windows(batches):
        after_warmup = Counters(epoch=window.epoch, iteration=10**6, last_optimizer_step=10**6 - 1, batch=window.batch)
        stats = train_one_epoch(parts, window, plan, after_warmup, show_progress=False)
        images, seconds = images + stats.images, seconds + stats.seconds
    return images / seconds


def main() -> None:
    if "OMP_WAIT_POLICY" not in os.environ:  # read when torch loads, so start again with it (detect/__init__.py)
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="coco128.yaml")
    parser.add_argument("--cfg", default="yolov5n.yaml")
    parser.add_argument("--hyp", default="scratch-low.yaml")
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None,
                        help="AMP (default: the backend's, fp32 on the CPU: training times bf16 first, this does not)")
    parser.add_argument("--cache", default=None, choices=("ram",))
    parser.add_argument("--batches", type=int, default=48, help="batches per round and mode")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(cpu_description())  # what the figures were measured on (docs/benchmarks.md)

    backend = backends.select(args.device, amp=args.amp)
    backend.set_device()
    backend.seed(0)
    hyp, data = load_hyp(args.hyp), load_data_config(args.data)
    loader = build_train_loader(load_split(data, "train"),
                                TrainLoaderSettings(AugmentSettings.from_hyp(hyp), args.imgsz, args.batch_size,
                                                    args.workers, seed=0, cache=args.cache,
                                                    pin_memory=backend.device.type != "cpu"))
    model = build_model(args.cfg, num_classes=len(data.names)).to(backend.device)
    if backend.channels_last:
        model = model.to(memory_format=torch.channels_last)
    settings = OptimSettings.from_hyp(hyp)
    parts = build_parts(model, backend, StepRecipe(hyp, settings, args.batch_size, args.imgsz), ModelEMA(model))
    plan = IterationPlan(settings, args.batch_size, warmup_iterations=0, epochs=100)
    cursor = StreamCursor(loader)
    fixed = next(iter(loader))
    accumulate = accumulate_steps(args.batch_size)
    model_only(parts, backend, fixed, 2, accumulate)  # warm-up: allocator, kernels, worker start
    end_to_end(parts, plan, cursor, min(len(loader), args.batches))  # and the loader's stream, a round or an epoch
    rates, faults = {"model only": [], "end to end": []}, []
    for _ in range(args.rounds):
        wait_for_idle_workers(loader)
        rate, faults_per_step = model_only(parts, backend, fixed, args.batches, accumulate)
        rates["model only"].append(rate)
        faults.append(faults_per_step)
        rates["end to end"].append(end_to_end(parts, plan, cursor, args.batches))
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    print(f"{args.cfg} at {args.imgsz}, batch {args.batch_size}, {args.workers} workers, {backend}, "
          f"{torch.get_num_threads()} threads")
    for mode, values in rates.items():
        print(f"{mode:>11}: {medians[mode]:6.1f} img/s (rounds: {', '.join(f'{v:.1f}' for v in values)})")
    print(f"end to end / model only: {medians['end to end'] / medians['model only']:.2f}")
    print(f"page faults per model-only step: {statistics.median(faults):.0f}")
    print(f"peak memory: device {backend.memory_stats().peak_bytes / 1e9:.2f} GB, "
          f"host {backends.host_memory_stats().peak_bytes / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
