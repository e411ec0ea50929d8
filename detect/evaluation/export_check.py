"""`detect.export --check`: every written file scored on the data's val split beside the .pt it came from, as one
table (format, size, mAP@0.5:0.95, mAP@0.5, inference ms per image), in the spirit of yolov5's benchmarks.py.

Every file is scored the same way, so that the rows compare: square letterboxed inputs at the export's size (what a
static export takes), the export's batch size, validation's thresholds. A file that cannot run here (an .om on a
machine without an Ascend NPU) gets its row with the reason instead of numbers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from detect.backend import Backend
from detect.data import ValLoaderSettings
from detect.errors import UserError
from detect.evaluation.evaluator import CocoEvaluator
from detect.evaluation.scoring import ScoredSplit, prepare_scoring
from detect.evaluation.val_loop import PassOptions, evaluate


@dataclasses.dataclass(frozen=True)
class CheckRow:
    """One file's scores, or why it has none."""

    format: str
    path: Path
    megabytes: float
    map50_95: float | None = None
    map50: float | None = None
    inference_ms: float | None = None
    problem: str | None = None


def file_megabytes(path: Path) -> float:
    """Megabytes of a file, with its weights file for an OpenVINO .xml (whose weights are the .bin beside it)."""
    files = [path, path.with_suffix(".bin")] if path.suffix == ".xml" else [path]
    return sum(file.stat().st_size for file in files if file.is_file()) / 1e6


def check_files(files: dict[str, Path], data: str, imgsz: int, batch_size: int, backend: Backend,
                workers: int | None = None) -> list[CheckRow]:
    """Score each (format, path) of `files` in order; a UserError becomes that row's problem."""
    rows = []
    for kind, path in files.items():
        try:
            loading = ValLoaderSettings(imgsz, batch_size, workers, rect=False)
            predict, loader = prepare_scoring(path, ScoredSplit(data), backend, loading)
            result = evaluate(predict, loader, backend, CocoEvaluator.for_split(loader.split),
                              options=PassOptions(progress=False))
        except UserError as error:
            rows.append(CheckRow(kind, path, file_megabytes(path), problem=str(error)))
            continue
        rows.append(CheckRow(kind, path, file_megabytes(path), result.metrics.map50_95, result.metrics.map50,
                             result.speed.inference))
    return rows


def check_table(rows: list[CheckRow]) -> str:
    """The rows as a text table; the first row is the reference the mAP differences are taken against."""
    reference = rows[0].map50_95 if rows else None
    lines = [f"{'format':<12} {'size MB':>8} {'mAP50-95':>9} {'mAP50':>7} {'vs first':>9} {'ms/img':>7}  file"]
    for row in rows:
        if row.problem is not None:
            lines.append(f"{row.format:<12} {row.megabytes:>8.1f} {'-':>9} {'-':>7} {'-':>9} {'-':>7}  {row.path}: "
                         f"{row.problem}")
            continue
        difference = f"{row.map50_95 - reference:+.4f}" if reference is not None else "-"
        lines.append(f"{row.format:<12} {row.megabytes:>8.1f} {row.map50_95:>9.4f} {row.map50:>7.4f} "
                     f"{difference:>9} {row.inference_ms:>7.1f}  {row.path}")
    return "\n".join(lines)
