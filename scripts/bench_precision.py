"""Training's default precision against --no-amp and --amp: the same `python -m detect.train` command three ways,
alternating for --rounds rounds in one run, so that a load that comes and goes falls on all three (docs/benchmarks.md,
"bf16 on the CPU"). Each run's figure is the last epoch's img/s (results.csv's train/img_per_s: the first epoch warms
the kernels up); the default's precision line says what it chose and why. The runs share one fresh cache folder
(--cache-dir under the output folder): the default's first run times bf16 against fp32, the later ones read that
verdict. Arguments after `--` replace the training command's (the issue's command by default).

    python scripts/bench_precision.py --rounds 2
    python scripts/bench_precision.py --rounds 2 -- --cfg yolov5n.yaml --data shapes.yaml --imgsz 640 --epochs 2 \\
        --batch-size 16 --workers 2 --device cpu --noval
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from detect.backend.cpu import cpu_description

TRAIN = ("--cfg", "yolov5n.yaml", "--data", "shapes.yaml", "--imgsz", "320", "--epochs", "2", "--batch-size", "16",
         "--workers", "2", "--device", "cpu", "--noval")
MODES = {"default": (), "--no-amp": ("--no-amp",), "--amp": ("--amp",)}


def train_once(train: list[str], flags: tuple[str, ...], out: Path, name: str) -> tuple[float, float, list[str]]:
    """One training run: its last epoch's img/s, its wall seconds, and its precision and AMP timing lines."""
    command = [sys.executable, "-m", "detect.train", *train, *flags, "--project", str(out / "runs"), "--name", name,
               "--cache-dir", str(out / "cache"), "--no-progress", "--noplots"]
    started = time.perf_counter()
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if finished.returncode != 0:
        sys.exit(f"{' '.join(command)} ended with {finished.returncode}:\n{finished.stderr[-3000:]}")
    lines = [line[line.find(marker):] for line in (finished.stdout + finished.stderr).splitlines()
             for marker in ("precision: ", "AMP timing: ") if marker in line]
    with open(out / "runs" / name / "results.csv", newline="") as rows:
        last = list(csv.DictReader(rows))[-1]
    return float(next(value for key, value in last.items() if key.strip() == "train/img_per_s")), seconds, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    parser.add_argument("train", nargs="*", help="after --: the training command's arguments")
    args = parser.parse_args()
    train = args.train or list(TRAIN)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_precision-"))
    print(cpu_description())  # what the figures were measured on (docs/benchmarks.md)
    print(f"load average before: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_index in range(args.rounds):
        for mode, flags in MODES.items():
            rate, seconds, lines = train_once(train, flags, out, f"{mode.strip('-')}-{round_index}")
            rates[mode].append(rate)
            print(f"round {round_index + 1} {mode:>8}: {rate:6.1f} img/s, {seconds:5.1f} s in all; "
                  + "; ".join(lines))
    print(f"load average after: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    print(f"python -m detect.train {' '.join(train)}, {args.rounds} rounds, median img/s: "
          + ", ".join(f"{mode} {median:.1f}" for mode, median in medians.items()))
    print(f"default / --no-amp: {medians['default'] / medians['--no-amp']:.2f}, default / --amp: "
          f"{medians['default'] / medians['--amp']:.2f}")


if __name__ == "__main__":
    main()
