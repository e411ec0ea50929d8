"""scripts/trace_val_path.py: the stays of a traced call, and validation's path kept to its returns
(docs/architecture.md, "Validation's path")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.scripts.modules import script
from tests.shared_data import coco128_layout, needs_shared

REPO = Path(__file__).resolve().parents[2]

# The traced path's returns to a module already left, by split (docs/architecture.md, "Validation's path"): the
# built-in folder split 61 (70 before the path was made one pass, 58 after, 63 once the data's storage became one
# object, 61 with the label check one pass of load_split); coco128's COCO json split 66 (the reader's own helpers); a
# bucket's split of txt labels 58 (no built-in dataset to generate); one more each for the one writer (issue 58:
# atomic_file/places.py, entered for the weights as a source, then for the run folder), two for a bucket (whose cache
# folders it makes first). A change that sends validation back and forth again fails here.
MAX_RETURNS = {"folder": 62, "coco_json": 67, "bucket": 60}


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


def traced_returns(cwd: Path, *flags: str, environ: dict[str, str] | None = None) -> tuple[int, str]:
    """The returns of the script's traced walk, and the walk, as a user runs it (`flags` after --list): in a fresh
    process, so that what earlier tests imported or called cannot move the figure."""
    finished = subprocess.run([sys.executable, str(REPO / "scripts" / "trace_val_path.py"), "--list", *flags],
                              cwd=cwd, capture_output=True, text=True, timeout=300, check=True,
                              env={**(environ or os.environ), "PYTHONPATH": str(REPO)})
    *stays, summary = finished.stdout.strip().splitlines()
    stays_count, modules, returns = map(int, re.fullmatch(r"(\d+) stays in (\d+) modules, (\d+) returns to a module "
                                                          r"already left", summary).groups())
    assert stays[0].endswith(". val.py") and stays_count == len(stays) and modules > 20, finished.stdout
    return returns, finished.stdout


def test_validation_of_a_folder_split_returns_to_a_module_at_most_the_measured_times(tmp_path):
    returns, walk = traced_returns(tmp_path)
    assert returns <= MAX_RETURNS["folder"], walk


@needs_shared
def test_validation_of_a_coco_json_split_returns_to_a_module_at_most_the_measured_times(tmp_path):
    # the bundled coco128.yaml, its val split scored against annotations/instances_train2017.json
    returns, walk = traced_returns(coco128_layout(tmp_path), "--data", "coco128.yaml")
    assert returns <= MAX_RETURNS["coco_json"] and "data/annotations/coco_json.py" in walk, walk
