"""scripts/trace_val_path.py: the stays of a traced call, and validation's path kept to its returns
(docs/architecture.md, "Validation's path")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.scripts.modules import script

REPO = Path(__file__).resolve().parents[2]

# The traced path's returns to a module already left (63 measured; 70 before the path was made one pass, 58 after,
# then 4 more once the data's storage became one object that the split's listing, its label cache's key, the loader
# and each image read consult: data/storage/local.py): a change that sends validation back and forth again fails here.
MAX_RETURNS = 63


def test_consecutive_calls_in_one_module_are_one_stay_and_a_later_one_a_return():
    trace = script("trace_val_path")
    calls = [("val.py", "validate"), ("val.py", "_prepare"), ("data/loader.py", "build"), ("val.py", "report")]
    walk = trace.walk_of(calls)
    assert walk.stays == ("val.py", "data/loader.py", "val.py")
    assert (walk.modules, walk.returns) == (2, 1)
    assert walk.lines()[-1] == "  3. val.py  (visit 2)"


def test_traced_calls_record_the_first_call_of_each_package_function_in_order():
    trace = script("trace_val_path")
    import torch

    from detect.ops.boxes import xywh_to_xyxy

    def twice(boxes):
        return xywh_to_xyxy(xywh_to_xyxy(boxes))

    result, calls = trace.traced_calls(twice, torch.zeros(1, 4))
    assert result.shape == (1, 4)
    assert calls[0] == ("ops/boxes.py", "xywh_to_xyxy") and len(calls) == len(set(calls))


def test_validation_returns_to_a_module_at_most_the_measured_times(tmp_path):
    # The script as a user runs it, in a fresh process: what earlier tests imported or called cannot move the figure.
    finished = subprocess.run([sys.executable, str(REPO / "scripts" / "trace_val_path.py"), "--list"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, check=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    *stays, summary = finished.stdout.strip().splitlines()
    stays_count, modules, returns = map(int, re.fullmatch(
        r"(\d+) stays in (\d+) modules, (\d+) returns to a module already left", summary).groups())
    assert stays[0].endswith(". val.py") and stays_count == len(stays) and modules > 20
    assert returns <= MAX_RETURNS, finished.stdout
