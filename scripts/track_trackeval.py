"""The scores of scripts/track_benchmark.py checked with TrackEval itself (the MOTChallenge reference code; the
`trackeval` package, MIT, which asks pip for opencv-python: run it from a venv of its own, such as ultralytics'):
each named result of a benchmark folder laid out as TrackEval's MOTChallenge layout and scored with HOTA, CLEAR and
Identity; prints one line per result.

    ~/venvs/ultralytics/bin/python scripts/track_trackeval.py --bench /tmp/track-bench \\
        crossing1-plain-ours-bytetrack crossing1-plain-ultralytics-bytetrack
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
import trackeval


def layout(root: Path, bench: Path, sequence: str, result: str) -> None:
    """TrackEval's folders for one sequence and one result: gt/<seq>/gt/gt.txt with seqinfo.ini, and the result's
    rows as frame, id, x, y, w, h, conf, -1, -1, -1."""
    truth = root / "gt" / "BENCH-train" / sequence
    (truth / "gt").mkdir(parents=True)
    shutil.copy(bench / "sequences" / sequence / "gt.txt", truth / "gt" / "gt.txt")
    frames = len(list((bench / "sequences" / sequence / "frames").glob("*.jpg")))
    (truth / "seqinfo.ini").write_text(f"[Sequence]\nname={sequence}\nseqLength={frames}\n")
    (root / "gt" / "seqmaps").mkdir()
    (root / "gt" / "seqmaps" / "BENCH-train.txt").write_text(f"name\n{sequence}\n")
    data = root / "trackers" / "BENCH-train" / result / "data"
    data.mkdir(parents=True)
    rows = np.loadtxt(bench / "mot" / f"{result}.txt", delimiter=",", ndmin=2)
    np.savetxt(data / f"{sequence}.txt", np.column_stack([rows[:, :7], -np.ones((len(rows), 3))]), fmt="%g",
               delimiter=",")


def score(bench: Path, result: str) -> dict[str, float]:
    sequence = result.split("-")[0]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        layout(root, bench, sequence, result)
        quiet = {"PRINT_RESULTS": False, "PRINT_CONFIG": False, "OUTPUT_SUMMARY": False, "OUTPUT_DETAILED": False,
                 "PLOT_CURVES": False, "TIME_PROGRESS": False}
        evaluator = trackeval.Evaluator({**trackeval.Evaluator.get_default_eval_config(), **quiet})
        dataset = trackeval.datasets.MotChallenge2DBox({
            **trackeval.datasets.MotChallenge2DBox.get_default_dataset_config(), "GT_FOLDER": str(root / "gt"),
            "TRACKERS_FOLDER": str(root / "trackers"), "BENCHMARK": "BENCH", "SPLIT_TO_EVAL": "train",
            "TRACKERS_TO_EVAL": [result], "PRINT_CONFIG": False})
        metrics = [trackeval.metrics.HOTA(), trackeval.metrics.CLEAR(), trackeval.metrics.Identity()]
        scored = evaluator.evaluate([dataset], metrics)[0]["MotChallenge2DBox"][result][sequence]["pedestrian"]
    return {"HOTA": float(np.mean(scored["HOTA"]["HOTA"])), "MOTA": float(scored["CLEAR"]["MOTA"]),
            "IDF1": float(scored["Identity"]["IDF1"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True, type=Path, help="scripts/track_benchmark.py's --out")
    parser.add_argument("results", nargs="+", help="result names: the stems of <bench>/mot/*.txt")
    args = parser.parse_args()
    for result in args.results:
        scores = score(args.bench, result)
        print(f"{result}: HOTA {scores['HOTA']:.4f} MOTA {scores['MOTA']:.4f} IDF1 {scores['IDF1']:.4f} (TrackEval)")


if __name__ == "__main__":
    main()
