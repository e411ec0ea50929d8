"""Tracking measured: sequences with known identities made from coco128 (scripts/track_sequences.py), yolov5n's
detections of each frame made once (plain, and sliced on the large-frame pan), our trackers (the trackers library
through detect's adapter) and, with --ultralytics-python, ultralytics' own ByteTrack, BoT-SORT and OC-SORT run from
their own environment on the same detections (scripts/track_ultralytics.py), every result scored with HOTA, MOTA and
IDF1 (the trackers library's evaluator, TrackEval's definitions). Prints a markdown table (docs/benchmarks.md,
"Tracking") and writes results.json.

    python scripts/track_benchmark.py --weights weights/yolov5n.pt --coco128 ../datasets/coco128 \\
        --out /tmp/track-bench --ultralytics-python ~/venvs/ultralytics/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_serve import cpu_model
from track_sequences import crossing, pan

from detect.inference.detector import Detector, PredictSettings
from detect.inference.slicing import SliceSettings
from detect.inference.tracks.settings import KINDS
from detect.inference.tracks.streams import StreamTracker

ULTRALYTICS_SCRIPT = Path(__file__).resolve().parent / "track_ultralytics.py"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--coco128", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--frames", type=int, default=80, help="frames of each crossing sequence")
    parser.add_argument("--pan-frames", type=int, default=40, help="frames of the pan")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--slice", type=int, default=640, help="window of the pan's sliced detections")
    parser.add_argument("--conf", type=float, default=0.1, help="detector threshold (detect.track's default)")
    parser.add_argument("--ultralytics-python", help="the interpreter of a venv with ultralytics (never ours)")
    return parser.parse_args()


def frame_files(sequence: Path) -> list[Path]:
    return sorted((sequence / "frames").glob("*.jpg"))


def detect(sequence: Path, detector: Detector, out: Path) -> tuple[Path, float]:
    """Every frame's detections as rows [frame, x1, y1, x2, y2, score, class] in `out`; returns it and the
    detector's frames per second."""
    rows, seconds = [], 0.0
    for number, path in enumerate(frame_files(sequence), 1):
        image = cv2.imread(str(path))
        start = time.perf_counter()
        found = detector(image)[0].rows.numpy()
        seconds += time.perf_counter() - start
        rows.append(np.concatenate([np.full((len(found), 1), number, np.float32), found], axis=1))
    np.savetxt(out, np.concatenate(rows), fmt="%.4f", delimiter=",")
    return out, len(rows) / seconds


def read_detections(path: Path, frames: int) -> list[np.ndarray]:
    table = np.loadtxt(path, delimiter=",", ndmin=2).astype(np.float32)
    return [table[table[:, 0] == number, 1:] for number in range(1, frames + 1)]


def track_ours(sequence: Path, detections: Path, kind: str, out: Path, names: tuple[str, ...]) -> float:
    """Our tracker `kind` (its bundled settings) over the stored detections into a MOT file; returns its frames per
    second (the tracker alone)."""
    files = frame_files(sequence)
    per_frame = read_detections(detections, len(files))
    tracker = StreamTracker(KINDS[kind](), names)
    lines, seconds = [], 0.0
    for number, (path, rows) in enumerate(zip(files, per_frame), 1):
        image = cv2.imread(str(path))
        start = time.perf_counter()
        tracks = tracker.update(rows, image)
        seconds += time.perf_counter() - start
        lines += [f"{number},{track_id},{x1:.2f},{y1:.2f},{x2 - x1:.2f},{y2 - y1:.2f},{score:.4f},{cls}\n"
                  for track_id, (x1, y1, x2, y2), score, cls in zip(tracks.ids.tolist(), tracks.boxes.tolist(),
                                                                   tracks.scores.tolist(), tracks.classes.tolist())]
    out.write_text("".join(lines))
    return len(files) / seconds


def track_ultralytics(python: str, sequence: Path, detections: Path, kind: str, out: Path) -> float:
    """ultralytics' tracker `kind` in its own interpreter; returns its frames per second."""
    result = subprocess.run([python, str(ULTRALYTICS_SCRIPT), "--frames", str(sequence / "frames"), "--detections",
                             str(detections), "--tracker", kind, "--out", str(out)], check=True, capture_output=True,
                            text=True, env={**os.environ, "YOLO_OFFLINE": "1"})
    return float(json.loads(result.stdout.strip().splitlines()[-1])["fps"])


def score(gt: Path, result: Path) -> dict[str, float]:
    from trackers.eval import evaluate_mot_sequence

    if not result.read_text().strip():
        return {"HOTA": 0.0, "MOTA": 0.0, "IDF1": 0.0, "IDSW": 0}
    scored = evaluate_mot_sequence(gt, result, metrics=["CLEAR", "HOTA", "Identity"])
    return {"HOTA": scored.HOTA.HOTA, "MOTA": scored.CLEAR.MOTA, "IDF1": scored.Identity.IDF1,
            "IDSW": scored.CLEAR.IDSW}


def runs_of(args: argparse.Namespace) -> list[tuple[str, Path, str]]:
    """(name, folder, detections mode) of each sequence to score: the crossings plain, the pan plain and sliced."""
    sequences = args.out / "sequences"
    made = [(f"crossing{seed}", crossing(args.coco128, sequences / f"crossing{seed}", args.frames, seed))
            for seed in (1, 2)]
    made.append(("pan", pan(args.coco128, sequences / "pan", args.pan_frames)))
    return [(name, folder, "plain") for name, folder in made] + [("pan", made[-1][1], "sliced")]


def main() -> None:
    args = parse_args()
    (args.out / "mot").mkdir(parents=True, exist_ok=True)
    print(f"CPU: {cpu_model()}, load {os.getloadavg()}", flush=True)
    detectors = {"plain": Detector(args.weights, "cpu", PredictSettings((args.imgsz, args.imgsz), args.conf)),
                 "sliced": Detector(args.weights, "cpu", PredictSettings((args.imgsz, args.imgsz), args.conf,
                                                                           slicing=SliceSettings(args.slice)))}
    results = []
    sides = ["ours"] + (["ultralytics"] if args.ultralytics_python else [])
    for name, folder, mode in runs_of(args):
        detections, detector_fps = detect(folder, detectors[mode], args.out / f"{name}-{mode}-detections.txt")
        print(f"{name} {mode}: detector {detector_fps:.2f} frames/s", flush=True)
        for kind in KINDS:
            for side in sides:
                out = args.out / "mot" / f"{name}-{mode}-{side}-{kind}.txt"
                if side == "ours":
                    tracker_fps = track_ours(folder, detections, kind, out, detectors[mode].names)
                else:
                    tracker_fps = track_ultralytics(args.ultralytics_python, folder, detections, kind, out)
                row = {"sequence": name, "detections": mode, "side": side, "tracker": kind,
                       "tracker_fps": tracker_fps, "detector_fps": detector_fps, **score(folder / "gt.txt", out)}
                results.append(row)
                print(json.dumps(row), flush=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"load after: {os.getloadavg()}")
    print(table(results))


def table(results: list[dict]) -> str:
    head = ("| sequence | detections | tracker | HOTA | MOTA | IDF1 | ID switches | tracker frames/s | detector "
            "frames/s |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for row in results:
        lines.append(f"| {row['sequence']} | {row['detections']} | {row['side']} {row['tracker']} | "
                     f"{row['HOTA']:.3f} | {row['MOTA']:.3f} | {row['IDF1']:.3f} | {row['IDSW']} | "
                     f"{row['tracker_fps']:.0f} | {row['detector_fps']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
