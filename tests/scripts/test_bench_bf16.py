"""scripts/bench_bf16.py --profile: the fp32 step's time by operator group, and the convolutions' rate."""

from __future__ import annotations

import argparse
import re

from tests.scripts.modules import script


def test_the_profile_splits_the_whole_step_and_counts_the_convolutions_work(capsys) -> None:
    bench = script("bench_bf16")
    bench.profile_step(argparse.Namespace(cfg="yolov5n.yaml", imgsz=64, batch_size=2, steps=1))
    lines = capsys.readouterr().out.splitlines()
    shares = [int(share) for share in re.findall(r"(\d+)%", lines[0])]
    assert len(shares) == 6 and abs(sum(shares) - 100) <= 3  # every aten operator's time in one group
    # yolov5n's forward at 64 px, batch 2: 4.5 GFLOP at 640 and batch 1 (docs/yolov5.md), / 100 * 2
    forward = float(re.search(r"forward's ([\d.]+) GFLOP", lines[1]).group(1))
    assert 0.05 <= forward <= 0.15, lines[1]
    assert lines[2].startswith("contiguous (NCHW): ") and lines[3].startswith("channels_last, 1 thread: ")
