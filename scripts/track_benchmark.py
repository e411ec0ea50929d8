"""Tracking measured: sequences with known identities made from coco128 (scripts/track_sequences.py), yolov5n's
detections of each frame made once (plain, and sliced on the large-frame pan), our trackers (the trackers library
through detect's adapter) and, with --ultralytics-python, ultralytics' own ByteTrack, BoT-SORT and OC-SORT run from
their own environment on the same detections (scripts/track_ultralytics.py), every result scored with HOTA, MOTA and
IDF1 (the trackers library's evaluator, TrackEval's definitions). Prints a markdown table (docs/benchmarks.md,
"Tracking") and writes results.json (with each result's DetA, AssA and false positives too).

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
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_serve import cpu_model
from track_sequences import crossing, pan

from detect.inference.detector import Detector, PredictSettings
from detect.inference.slicing import SliceSettings
from detect.inference.tracks.outputs import mot_lines
from detect.inference.tracks.settings import KINDS, load_tracker_settings
from detect.inference.tracks.streams import StreamTracker

ULTRALYTICS_SCRIPT = Path(__file__).resolve().parent / "track_ultralytics.py"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--coco128", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--frames", type=int, default=80, help="frames of each crossing sequence")
    parser.add_argument("--pan-frames", type=int, default=40, help="frames of the pan")
    parser.add_argument("--pan-heights", type=int, nargs="+", default=[1080],
                        help="the pan's frame heights (16:9 frames: 1080 is 1920 x 1080, 2160 is 4K)")
    parser.add_argument("--mosaic-grid", type=int, default=6, help="the pan's mosaic: grid x grid photos")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--slice", type=int, default=640, help="window of the pan's sliced detections")
    parser.add_argument("--conf", type=float, default=0.1, help="detector threshold (detect.track's default)")
    parser.add_argument("--ultralytics-python", help="the interpreter of a venv with ultralytics (never ours)")
    parser.add_argument("--trackers", nargs="+", default=list(KINDS),
                        help="our trackers: kinds (also run on ultralytics' side) or yamls of settings")
    parser.add_argument("--reuse", action="store_true", help="keep --out's sequences and detections from a run before")
    return parser.parse_args()


def frame_files(sequence: Path) -> list[Path]:
    return sorted((sequence / "frames").glob("*.jpg"))


def detect(sequence: Path, detector: Detector, out: Path, reuse: bool) -> tuple[Path, float]:
    """Every frame's detections as rows [frame, x1, y1, x2, y2, score, class] in `out` (kept from an earlier run with
    `reuse`); returns it and the detector's frames per second (beside it, in a .json)."""
    timing = out.with_suffix(".json")
    if reuse and out.is_file() and timing.is_file():
        return out, json.loads(timing.read_text())["fps"]
    rows, seconds = [], 0.0
    for number, path in enumerate(frame_files(sequence), 1):
        image = cv2.imread(str(path))
        start = time.perf_counter()
        found = detector(image)[0].rows.numpy()
        seconds += time.perf_counter() - start
        rows.append(np.concatenate([np.full((len(found), 1), number, np.float32), found], axis=1))
    np.savetxt(out, np.concatenate(rows), fmt="%.4f", delimiter=",")
    timing.write_text(json.dumps({"fps": len(rows) / seconds}))
    return out, len(rows) / seconds


def read_detections(path: Path, frames: int) -> list[np.ndarray]:
    table = np.loadtxt(path, delimiter=",", ndmin=2).astype(np.float32)
    return [table[table[:, 0] == number, 1:] for number in range(1, frames + 1)]


def track_ours(sequence: Path, detections: Path, tracker: str, out: Path, names: tuple[str, ...]) -> float:
    """Our tracker (a kind's bundled settings, or a yaml) over the stored detections into a MOT file; returns its
    frames per second (the tracker alone)."""
    files = frame_files(sequence)
    per_frame = read_detections(detections, len(files))
    state = StreamTracker(load_tracker_settings(tracker), names)
    lines, seconds = [], 0.0
    for number, (path, rows) in enumerate(zip(files, per_frame), 1):
        image = cv2.imread(str(path))
        start = time.perf_counter()
        tracks = state.update(rows, image)
        seconds += time.perf_counter() - start
        lines.append(mot_lines(number, tracks))
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
        return {"HOTA": 0.0, "DetA": 0.0, "AssA": 0.0, "MOTA": 0.0, "IDF1": 0.0, "IDSW": 0, "FP": 0}
    scored = evaluate_mot_sequence(gt, result, metrics=["CLEAR", "HOTA", "Identity"])
    return {"HOTA": scored.HOTA.HOTA, "DetA": scored.HOTA.DetA, "AssA": scored.HOTA.AssA, "MOTA": scored.CLEAR.MOTA,
            "IDF1": scored.Identity.IDF1, "IDSW": scored.CLEAR.IDSW, "FP": scored.CLEAR.CLR_FP}


def runs_of(args: argparse.Namespace) -> list[tuple[str, Path, str]]:
    """(name, folder, detections mode) of each sequence to score: the crossings plain, each pan plain and sliced."""
    sequences = args.out / "sequences"

    def made(name: str, build: Callable[[Path], Path]) -> tuple[str, Path]:
        folder = sequences / name
        return name, folder if args.reuse and (folder / "gt.txt").is_file() else build(folder)

    built = [made(f"crossing{seed}", lambda folder, seed=seed: crossing(args.coco128, folder, args.frames, seed))
             for seed in (1, 2)]
    pans = [made(f"pan{height}_{args.mosaic_grid}x{args.mosaic_grid}", lambda folder, height=height: pan(
        args.coco128, folder, args.pan_frames, (height, height * 16 // 9), args.mosaic_grid)) for height in args.pan_heights]
    return [(name, folder, "plain") for name, folder in built + pans] + [(name, folder, "sliced") for name, folder in pans]


def main() -> None:
    args = parse_args()
    (args.out / "mot").mkdir(parents=True, exist_ok=True)
    print(f"CPU: {cpu_model()}, load {os.getloadavg()}", flush=True)
    detectors = {"plain": Detector(args.weights, "cpu", PredictSettings((args.imgsz, args.imgsz), args.conf)),
                 "sliced": Detector(args.weights, "cpu", PredictSettings((args.imgsz, args.imgsz), args.conf,
                                                                           slicing=SliceSettings(args.slice)))}
    results = []
    for name, folder, mode in runs_of(args):
        detections, detector_fps = detect(folder, detectors[mode], args.out / f"{name}-{mode}-detections.txt",
                                          args.reuse)
        print(f"{name} {mode}: detector {detector_fps:.2f} frames/s", flush=True)
        for tracker in args.trackers:
            label = Path(tracker).stem
            sides = ["ours"] + (["ultralytics"] if args.ultralytics_python and tracker in KINDS else [])
            for side in sides:
                out = args.out / "mot" / f"{name}-{mode}-{side}-{label}.txt"
                if side == "ours":
                    tracker_fps = track_ours(folder, detections, tracker, out, detectors[mode].names)
                else:
                    tracker_fps = track_ultralytics(args.ultralytics_python, folder, detections, tracker, out)
                row = {"sequence": name, "detections": mode, "side": side, "tracker": label,
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
