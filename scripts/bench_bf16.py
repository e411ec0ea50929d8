"""bf16 on this CPU against fp32, piece by piece: what training's own timing of the model step (amp_check.amp_speed)
sums up, and why the flags cannot tell it (docs/benchmarks.md, "bf16 on the CPU").

conv:  a 3x3 convolution forward + backward (channels_last, as training runs it) in fp32 and under bf16 autocast,
       alternating for --rounds rounds in one process: GFLOP/s, min and median of the rounds, and bf16 / fp32.
model: the same for a whole model's training step (--cfg, random images at --imgsz, batch --batch-size, forward in
       train mode + backward of the outputs' mean square; no loader, no optimizer): images per second.
profile: with --profile, where the fp32 model step's time goes (torch.profiler: self CPU time by operator group),
       its convolutions' GFLOP/s against the lone convolution's, and the step in other layouts and thread counts.
val:   with --weights and --data, the mAP of validation during training (EvalSettings' thresholds, rectangular val
       batches) in fp32 and under bf16 autocast, and their difference (the choice keeps validation fp32 unless it is
       within 0.002).

    python scripts/bench_bf16.py --imgsz 320
    python scripts/bench_bf16.py --weights weights/yolov5n.pt --data coco128.yaml --imgsz 640
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch

from detect import backend as backends
from detect.backend.cpu import cpu_description
from detect.data import ValLoaderSettings
from detect.evaluation.evaluator import CocoEvaluator
from detect.evaluation.scoring import ScoredSplit, prepare_scoring
from detect.evaluation.val_loop import PassOptions, evaluate
from detect.models import build_model


def conv_seconds(channels: int, side: int, batch: int, bf16: bool, steps: int) -> float:
    """Median seconds of one forward + backward of a 3x3 convolution on (batch, channels, side, side)."""
    conv = torch.nn.Conv2d(channels, channels, 3, padding=1).to(memory_format=torch.channels_last)
    images = torch.randn(batch, channels, side, side).to(memory_format=torch.channels_last).requires_grad_()
    spent = []
    for _ in range(steps + 2):  # two warm-ups: oneDNN picks and caches its kernels
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            output = conv(images)
        output.float().sum().backward()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent[2:])


def bench_conv(args: argparse.Namespace) -> None:
    # forward 2*N*C*C*9*H*W FLOPs, backward twice that (input and weight gradients)
    flops = 3 * 2 * args.batch_size * args.channels**2 * 9 * args.side**2
    rates: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for _ in range(args.rounds):
        for name, values in rates.items():
            values.append(flops / conv_seconds(args.channels, args.side, args.batch_size, name == "bf16",
                                               args.steps) / 1e9)
    print(f"3x3 conv {args.channels} channels, {args.side}x{args.side}, batch {args.batch_size}, forward + backward, "
          f"{torch.get_num_threads()} threads, {args.rounds} rounds")
    _print_rates(rates, "GFLOP/s", 0)


def _print_rates(rates: dict[str, list[float]], unit: str, decimals: int) -> None:
    """Each precision's min and median over the rounds, and bf16 / fp32 round by round."""
    for name, values in rates.items():
        print(f"{name}: min {min(values):.{decimals}f} median {statistics.median(values):.{decimals}f} {unit} "
              f"(rounds: {', '.join(f'{value:.{decimals}f}' for value in values)})")
    ratios = [bf16 / fp32 for bf16, fp32 in zip(rates["bf16"], rates["fp32"])]
    print(f"bf16 / fp32 by round: {', '.join(f'{ratio:.2f}' for ratio in ratios)}; median "
          f"{statistics.median(ratios):.2f}")


def step_seconds(model: torch.nn.Module, images: torch.Tensor, bf16: bool, steps: int) -> float:
    """Median seconds of one forward (train mode) + backward of `model` on `images`."""
    spent = []
    for _ in range(steps + 2):
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            outputs = model(images)
        sum(output.float().square().mean() for output in outputs).backward()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent[2:])


def bench_model(args: argparse.Namespace) -> None:
    model = build_model(args.cfg, num_classes=80).train().to(memory_format=torch.channels_last)
    images = torch.rand(args.batch_size, 3, args.imgsz, args.imgsz).to(memory_format=torch.channels_last)
    rates: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for _ in range(args.rounds):
        for name, values in rates.items():
            values.append(args.batch_size / step_seconds(model, images, name == "bf16", args.steps))
    print(f"{args.cfg} at {args.imgsz}, batch {args.batch_size}, forward + backward, {args.rounds} rounds")
    _print_rates(rates, "img/s", 1)


# aten operators by what they are part of, for the profile's groups
GROUPS = (("convolution forward", ("convolution", "mkldnn_convolution", "conv2d", "_convolution")),
          ("convolution backward", ("convolution_backward",)),
          ("batch norm", ("batch_norm", "native_batch_norm", "_batch_norm_impl_index", "native_batch_norm_backward",
                          "batch_norm_backward")),
          ("SiLU", ("silu", "silu_", "silu_backward")),
          ("copies and layout", ("copy_", "contiguous", "clone", "to", "_to_copy", "empty_like", "cat", "empty")))


def profile_step(args: argparse.Namespace) -> None:
    """The fp32 model step: self CPU time by operator group, the convolutions' rate, and variants."""
    from torch.profiler import ProfilerActivity, profile

    model = build_model(args.cfg, num_classes=80).train().to(memory_format=torch.channels_last)
    images = torch.rand(args.batch_size, 3, args.imgsz, args.imgsz).to(memory_format=torch.channels_last)
    seconds = step_seconds(model, images, False, args.steps)
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as profiler:
        step_seconds(model, images, False, 1)  # three steps: two warm-ups and the timed one
    events = [event for event in profiler.key_averages() if event.key.startswith("aten::")]
    total = sum(event.self_cpu_time_total for event in events)
    shares = dict.fromkeys([name for name, _ in GROUPS] + ["other"], 0.0)
    for event in events:
        name = next((group for group, members in GROUPS if event.key.removeprefix("aten::") in members), "other")
        shares[name] += event.self_cpu_time_total / total
    forward_flops = sum(event.flops for event in events if event.key == "aten::conv2d") / 3  # per step
    print(f"fp32 {args.cfg} step at {args.imgsz}, batch {args.batch_size}: {args.batch_size / seconds:.1f} img/s; "
          f"self CPU time: " + ", ".join(f"{name} {share:.0%}" for name, share in shares.items()))
    conv_seconds_per_step = seconds * (shares["convolution forward"] + shares["convolution backward"])
    print(f"its convolutions (forward and both gradients, 3x the forward's {forward_flops / 1e9:.1f} GFLOP) run at "
          f"{3 * forward_flops / conv_seconds_per_step / 1e9:.0f} GFLOP/s; the whole step at "
          f"{3 * forward_flops / seconds / 1e9:.0f} GFLOP/s")
    threads = torch.get_num_threads()
    for label, layout, count in (("contiguous (NCHW)", torch.contiguous_format, threads),
                                 ("channels_last, 1 thread", torch.channels_last, 1)):
        torch.set_num_threads(count)
        variant = build_model(args.cfg, num_classes=80).train().to(memory_format=layout)
        rate = args.batch_size / step_seconds(variant, images.contiguous(memory_format=layout), False, args.steps)
        print(f"{label}: {rate:.1f} img/s")
    torch.set_num_threads(threads)


def bench_val(args: argparse.Namespace) -> None:
    backend = backends.select("cpu", amp=False)
    loading = ValLoaderSettings(args.imgsz, args.batch_size, args.workers)
    predict, loader = prepare_scoring(args.weights, ScoredSplit(args.data), backend, loading)
    scores = {}
    for name, context in (("fp32", contextlib.nullcontext()), ("bf16", torch.autocast("cpu", dtype=torch.bfloat16))):
        started = time.perf_counter()
        with context:
            result = evaluate(predict, loader, backend, CocoEvaluator.for_split(loader.split),
                              options=PassOptions(progress=False))
        scores[name] = result.metrics
        print(f"{name}: mAP@0.5:0.95 {result.metrics.map50_95:.4f}, mAP@0.5 {result.metrics.map50:.4f}, "
              f"{time.perf_counter() - started:.1f} s, inference {result.speed.inference:.1f} ms per image")
    print(f"bf16 - fp32: mAP@0.5:0.95 {scores['bf16'].map50_95 - scores['fp32'].map50_95:+.4f}, mAP@0.5 "
          f"{scores['bf16'].map50 - scores['fp32'].map50:+.4f} ({args.weights} on {args.data} at {args.imgsz})")


def main() -> None:
    if "OMP_WAIT_POLICY" not in os.environ:  # read when torch loads, as `python -m detect.train` sets it
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", help="also score these weights in fp32 and bf16 (with --data)")
    parser.add_argument("--data", default="coco128.yaml")
    parser.add_argument("--imgsz", type=int, default=640, help="val's size (with --weights) and the model step's")
    parser.add_argument("--cfg", default="yolov5n.yaml", help="the model whose training step is timed")
    parser.add_argument("--batch-size", type=int, default=16, help="convolution batch; val batch with --weights")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--side", type=int, default=40, help="the 3x3 convolution's input side (yolov5n at 320: 40)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="also profile the fp32 model step")
    args = parser.parse_args()
    print(cpu_description())  # what the figures were measured on (docs/benchmarks.md)
    if args.profile:
        profile_step(args)
    bench_conv(args)
    bench_model(args)
    if args.weights:
        bench_val(args)


if __name__ == "__main__":
    main()
