"""yolov5's val --task study: mAP and speed of each checkpoint over a sweep of image sizes, one study_*.txt each and
one plot of them all."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from detect.atomic_file import replacing
from detect.errors import UserError
from detect.evaluation.metric_plots import save_figure
from detect.evaluation.val_loop import EvalResult

LOGGER = logging.getLogger(__name__)

# yolov5 val.py: range(256, 1536 + 128, 128), 11 sizes.
STUDY_SIZES = tuple(range(256, 1536 + 128, 128))
# yolov5's row (P, R, mAP50, mAP50-95, 3 val losses, 3 times) and the image size after it, so that a file says which
# size each row is (yolov5's plot reads columns 0-3 and 7-9 and still reads these files). Standalone val computes
# no loss: its columns are 0, as in yolov5's own study files.
COLUMNS = ("P", "R", "mAP50", "mAP50-95", "box_loss", "obj_loss", "cls_loss", "pre_ms", "inference_ms", "nms_ms",
           "imgsz")


def study_file_name(data: str, weights: str) -> str:
    """yolov5's name: study_<data stem>_<weights stem>.txt."""
    return f"study_{Path(data).stem}_{Path(weights).stem}.txt"


def write_study(path: Path, sizes: Sequence[int], results: Sequence[EvalResult]) -> Path:
    """One row per image size, COLUMNS order, under a '#' header line (np.loadtxt skips it)."""
    rows = [(result.metrics.precision, result.metrics.recall, result.metrics.map50, result.metrics.map50_95, 0, 0, 0,
             result.speed.preprocess, result.speed.inference, result.speed.nms, size)
            for size, result in zip(sizes, results)]
    with replacing(path) as temporary:
        np.savetxt(temporary, np.array(rows, np.float64).reshape(-1, len(COLUMNS)), fmt="%10.4g",
                   header=" ".join(COLUMNS))
    return path


def plot_study(files: Sequence[Path], path: Path) -> Path:
    """study.png: mAP@0.5:0.95 against image size, and against inference ms per image, one line per file."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4), tight_layout=True)
    by_size, by_time = figure.subplots(1, 2)
    for file in files:
        table = np.loadtxt(file, ndmin=2)
        label = Path(file).stem.removeprefix("study_")
        by_size.plot(table[:, 10], table[:, 3] * 100, ".-", linewidth=2, markersize=8, label=label)
        by_time.plot(table[:, 8], table[:, 3] * 100, ".-", linewidth=2, markersize=8, label=label)
    by_size.set(xlabel="image size (pixels)", ylabel="mAP@0.5:0.95 (%)", title="mAP against image size")
    by_time.set(xlabel="inference (ms per image)", ylabel="mAP@0.5:0.95 (%)", title="mAP against speed")
    for axes in (by_size, by_time):
        axes.grid(alpha=0.2)
        axes.legend(loc="lower right", fontsize=8)
    return save_figure(figure, path)


def run_study(score: Callable[[str, int], EvalResult], weights: Sequence[str], data: str, save_dir: Path,
              sizes: Sequence[int] = STUDY_SIZES) -> list[Path]:
    """Score each checkpoint at each size (`score(weights, imgsz)`), write its study txt in `save_dir` and the plot of
    them all as study.png; returns the txt files."""
    names = [study_file_name(data, each) for each in weights]
    if len(set(names)) < len(names):
        raise UserError(f"--task study: two --weights have one file stem ({', '.join(weights)}); their study files "
                        f"would overwrite each other: rename one")
    files = []
    for each, name in zip(weights, names):
        path = save_dir / name
        results = []
        for size in sizes:
            LOGGER.info("%s: --imgsz %d", path.name, size)
            results.append(score(each, size))
        files.append(write_study(path, sizes, results))
    LOGGER.info("study plot: %s", plot_study(files, save_dir / "study.png"))
    return files
