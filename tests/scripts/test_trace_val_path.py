"""scripts/trace_val_path.py: the stays of a traced call, and validation's path traced for each kind of split, its
figures those of the walk it prints (docs/architecture.md, "Validation's path"; the figures guide, "Sizes")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.scripts.modules import script
from tests.shared_data import coco128_layout, needs_shared

REPO = Path(__file__).resolve().parents[2]

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


def traced_walk(cwd: Path, *flags: str, environ: dict[str, str] | None = None) -> str:
    """The script's traced walk as a user runs it (`flags` after --list), in a fresh process, so that what earlier
    tests imported or called cannot move it; its summary is checked against the stays it lists."""
    finished = subprocess.run([sys.executable, str(REPO / "scripts" / "trace_val_path.py"), "--list", *flags],
                              cwd=cwd, capture_output=True, text=True, timeout=300, check=True,
                              env={**(environ or os.environ), "PYTHONPATH": str(REPO)})
    *stays, summary = finished.stdout.strip().splitlines()
    stays_count, modules, returns = map(int, re.fullmatch(r"(\d+) stays in (\d+) modules, (\d+) returns to a module "
                                                          r"already left", summary).groups())
    listed = {line.split(". ", 1)[1].split()[0] for line in stays}
    assert stays[0].endswith(". val.py") and stays_count == len(stays) and modules == len(listed) > 20, finished.stdout
    assert returns == sum("(visit " in line for line in stays) == stays_count - modules, finished.stdout
    return finished.stdout


def test_validation_of_a_folder_split_is_traced_through_the_label_check(tmp_path):
    walk = traced_walk(tmp_path)
    assert "data/labels/split.py" in walk and "data/storage/local.py" in walk, walk


@needs_shared
def test_validation_of_a_coco_json_split_is_traced_through_its_reader(tmp_path):
    # the bundled coco128.yaml, its val split scored against annotations/instances_train2017.json
    walk = traced_walk(coco128_layout(tmp_path), "--data", "coco128.yaml")
    assert "data/annotations/coco_json.py" in walk, walk
