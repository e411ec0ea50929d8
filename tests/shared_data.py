"""Where the tests find the real data that is not in the repo: the official yolov5n.pt, coco128 and the COCO evaluation
references. One folder holds them, $DETECT_SHARED_DATA, by default `shared` beside the repo:

    weights/yolov5n.pt                 yolov5's release checkpoint (AGPL-3.0, never committed here)
    data/coco128/                      yolov5's coco128 (images/, labels/) plus annotations/instances_train2017.json
    data/coco_eval_reference/          reference detections and pycocotools stats

A test that needs it is marked `needs_shared` and skips, naming the folder, when any of it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DETECT_SHARED_DATA") or REPO.parent / "shared").expanduser().resolve()
YOLOV5N = SHARED / "weights" / "yolov5n.pt"
COCO128 = SHARED / "data" / "coco128"
COCO128_JSON = COCO128 / "annotations" / "instances_train2017.json"
EVAL_FIXTURES = SHARED / "data" / "coco_eval_reference"

SHARED_PRESENT = YOLOV5N.is_file() and COCO128.is_dir() and EVAL_FIXTURES.is_dir()
ABSENT_REASON = (f"the shared test data is absent: {SHARED} needs weights/yolov5n.pt, data/coco128 and "
                 "data/coco_eval_reference (set DETECT_SHARED_DATA to the folder that holds them)")
needs_shared = pytest.mark.skipif(not SHARED_PRESENT, reason=ABSENT_REASON)


def coco128_layout(folder: Path) -> Path:
    """yolov5's layout in `folder`: datasets/coco128 (a link to the shared coco128) beside a working folder, which is
    returned, so that the bundled coco128.yaml's `path: ../datasets/coco128` finds the data from it."""
    (folder / "datasets").mkdir(parents=True, exist_ok=True)
    (folder / "datasets" / "coco128").symlink_to(COCO128, target_is_directory=True)
    work = folder / "work"
    work.mkdir()
    return work
