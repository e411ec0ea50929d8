"""ultralytics' own tracker (ByteTrack, BoT-SORT or OC-SORT, with its bundled yaml) over detections stored by
scripts/track_benchmark.py, written as a MOT file. Run it with the interpreter of a venv that has ultralytics
(AGPL-3.0: its own environment, never a dependency of detect, which this script does not import); prints one json
line with the tracker's frames per second.

    /work/venvs/ultralytics/bin/python scripts/track_ultralytics.py --frames SEQ/frames --detections DETS.txt \\
        --tracker bytetrack --out OUT.txt
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import cv2
import numpy as np
from ultralytics.engine.results import Boxes
from ultralytics.trackers.track import TRACKER_MAP
from ultralytics.utils import YAML, IterableSimpleNamespace
from ultralytics.utils.checks import check_yaml


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", required=True, type=Path)
    parser.add_argument("--detections", required=True, type=Path, help="rows: frame, x1, y1, x2, y2, score, class")
    parser.add_argument("--tracker", required=True, choices=("bytetrack", "botsort", "ocsort"))
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    settings = IterableSimpleNamespace(**YAML.load(check_yaml(f"{args.tracker}.yaml")))
    tracker = TRACKER_MAP[settings.tracker_type](args=settings)
    table = np.loadtxt(args.detections, delimiter=",", ndmin=2).astype(np.float32)
    files = sorted(args.frames.glob("*.jpg"))
    lines, seconds = [], 0.0
    for number, path in enumerate(files, 1):
        image = cv2.imread(str(path))
        rows = table[table[:, 0] == number, 1:]
        start = time.perf_counter()
        tracked = tracker.update(Boxes(rows, image.shape[:2]).numpy(), image)  # [x1, y1, x2, y2, id, score, cls, idx]
        seconds += time.perf_counter() - start
        lines += [f"{number},{int(track_id)},{x1:.2f},{y1:.2f},{x2 - x1:.2f},{y2 - y1:.2f},{score:.4f},{int(cls)}\n"
                  for x1, y1, x2, y2, track_id, score, cls, _ in tracked.tolist()]
    args.out.write_text("".join(lines))
    print(json.dumps({"fps": len(files) / seconds}))


if __name__ == "__main__":
    main()
