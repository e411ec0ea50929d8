"""scripts/bench_precision.py: training's default, --no-amp and --amp in one run, the default's timing and precision
line beside its rate."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.scripts.modules import SCRIPTS
from tests.training.helpers import tiny_dataset


@pytest.mark.slow
def test_a_tiny_run_times_the_default_and_reports_the_three_rates_and_ratios(tmp_path) -> None:
    train = ["--cfg", "yolov5n.yaml", "--data", str(tiny_dataset(tmp_path / "data")), "--imgsz", "64", "--epochs",
             "1", "--batch-size", "4", "--workers", "0", "--device", "cpu", "--noval"]
    finished = subprocess.run([sys.executable, str(SCRIPTS / "bench_precision.py"), "--rounds", "1", "--out",
                               str(tmp_path / "out"), "--", *train], capture_output=True, text=True, timeout=600,
                              check=False)
    assert finished.returncode == 0, finished.stderr
    row = re.compile(r"^round (\d) +(default|--no-amp|--amp): +[0-9.]+ img/s, +[0-9.]+ s in all; (.*)$", re.MULTILINE)
    rows = {match.group(1, 2): match.group(3) for match in row.finditer(finished.stdout)}
    assert sorted(rows) == [("1", "--amp"), ("1", "--no-amp"), ("1", "default")]
    assert rows["1", "default"].startswith("AMP timing: a training step at batch 4, 64x64: fp32 ")  # the fresh cache's
    assert re.search(r"; precision: (fp32|bf16 autocast) \(bf16 measured [0-9.]+x fp32 on this CPU; ",
                     rows["1", "default"]), rows["1", "default"]
    assert rows["1", "--no-amp"] == "precision: fp32 (--no-amp)" and rows["1", "--amp"] == "precision: bf16 autocast (--amp)"
    ratios = re.search(r"^default / --no-amp: ([0-9.]+), default / --amp: ([0-9.]+)$", finished.stdout, re.MULTILINE)
    assert ratios is not None and all(float(ratio) > 0 for ratio in ratios.groups()), finished.stdout
    assert len(list((tmp_path / "out" / "cache" / "amp_speed").glob("*.json"))) == 1
