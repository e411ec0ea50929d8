"""scripts/bench_train.py: its end-to-end rounds go on along the one stream, and a tiny run reports a ratio."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.scripts.modules import SCRIPTS, script


class EightBatches:
    def __len__(self) -> int:
        return 8


def test_rounds_take_the_batches_that_come_next_across_epochs() -> None:
    cursor = script("bench_train").StreamCursor(EightBatches())
    assert [(w.epoch, w.batch, w.count) for w in cursor.windows(20)] == [(0, 0, 8), (1, 0, 8), (2, 0, 4)]
    assert [(w.epoch, w.batch, w.count) for w in cursor.windows(6)] == [(2, 4, 4), (3, 0, 2)]
    assert (cursor.epoch, cursor.batch) == (3, 2)


def test_a_tiny_run_reports_both_rates_and_their_ratio() -> None:
    finished = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_train.py"), "--data", "shapes.yaml", "--imgsz", "64", "--batch-size",
         "4", "--workers", "2", "--batches", "10", "--rounds", "1"],
        check=False, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    ratio = re.search(r"end to end / model only: ([0-9.]+)", finished.stdout)
    assert ratio is not None and 0 < float(ratio.group(1)) < 3, finished.stdout
