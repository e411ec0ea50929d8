"""`python -m detect.benchmarks` (yolov5's benchmarks.py): each export format exported from --weights, scored on
--data's val split and timed alike, in one table (export --check's rows); a format that this host cannot run or
that fails gets its row with the reason.

    python -m detect.benchmarks --weights yolov5s.pt --imgsz 640 --device cpu
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from detect import atomic_file, cli
from detect import backend as backends
from detect.backend.cpu import cpu_description
from detect.config import IMAGE_SIZE, POSITIVE, Settings, option, options_from_dict
from detect.errors import UserError
from detect.evaluation.export_check import CheckRow, check_files, check_table, file_megabytes
from detect.exporters.formats import write_formats
from detect.exporters.torchscript import ExportSettings
from detect.inference.model import PYTORCH, benchmarked_names
from detect.models.weights import YOLOV5_DEFAULT_WEIGHTS, load_model, resolve_weights
from detect.run_dir import check_folder

LOGGER = logging.getLogger("detect.benchmarks")
FORMATS = benchmarked_names()  # yolov5's order, then ours: those detect writes and runs


@dataclasses.dataclass(frozen=True)
class BenchmarkSettings(Settings):
    """The options of `python -m detect.benchmarks` and `detect.benchmarks.run`, with yolov5's names."""

    weights: str = option(YOLOV5_DEFAULT_WEIGHTS, "checkpoint: ours (.pt) or an ultralytics/yolov5 .pt (a bare name: "
                                                  "the working folder, then ./weights/; never downloaded)")
    imgsz: int = option(640, "square input size of every format, pixels", bound=IMAGE_SIZE)
    batch_size: int = option(1, "batch size of the exports and of scoring", bound=POSITIVE)
    data: str = option("shapes.yaml", "data yaml whose val split scores each format")
    device: str = option("auto", backends.SPEC_HELP)
    half: bool = option(False, "fp16 exports (on the CPU: fp32, with a warning)")
    test: bool = option(False, "export only: sizes, no scores")
    pt_only: bool = option(False, "the PyTorch row only")
    # -inf: the bare flag sets no floor (every mAP passes), as yolov5's bare --hard-fail
    hard_fail: float | None = option(None, "stop with an error when a format fails (not one this host cannot run); "
                                           "with a number, also when a mAP50-95 is not above it", const=-math.inf)
    soc_version: str | None = option(None, "om: the Ascend chip (default: this NPU's name)")
    output_dir: str | None = option(None, "where the exports go (default: beside --weights)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.output_dir is not None:
            check_folder(self.output_dir, "--output-dir")


parse_args = cli.settings_reader(BenchmarkSettings, "python -m detect.benchmarks", __doc__)


def run(**options: Any) -> list[CheckRow]:
    """Benchmark from Python with the CLI's flags as keyword arguments; returns the table's rows."""
    return benchmark(options_from_dict(BenchmarkSettings, options, "detect.benchmarks.run"))


@atomic_file.command()  # what it reads is its sources until it ends
def benchmark(settings: BenchmarkSettings) -> list[CheckRow]:
    """Export, score and time each format in turn; one table. The CLI's body."""
    started = time.perf_counter()
    weights = resolve_weights(settings.weights)
    backend = backends.select(settings.device, amp=False)
    backend.set_device()
    if settings.half and backend.device.type == "cpu":
        LOGGER.warning("--half: fp16 needs an accelerator; exporting and scoring in fp32 on the CPU")
        settings = dataclasses.replace(settings, half=False)
    output_dir = Path(settings.output_dir) if settings.output_dir else weights.parent
    atomic_file.output_folder(output_dir, "--output-dir")
    if not os.access(output_dir, os.W_OK):
        raise UserError(f"cannot write to {output_dir}: choose another folder with --output-dir")
    rows = [_row(kind, weights, output_dir / weights.stem, settings, backend)
            for kind in (FORMATS[:1] if settings.pt_only else FORMATS)]
    LOGGER.info("benchmarks of %s on %s (val split, %d px, batch %d, %s), %.1f s; %s:\n%s", weights, settings.data,
                settings.imgsz, settings.batch_size, backend.device, time.perf_counter() - started, cpu_description(),
                check_table(rows))
    _hard_fail(rows, settings.hard_fail)
    return rows


def _row(kind: str, weights: Path, stem: Path, settings: BenchmarkSettings, backend: backends.Backend) -> CheckRow:
    """One format's row: exported (but pytorch), then scored; a UserError (what this host lacks) or any other
    failure is the row's problem, the latter marked `failed:`."""
    try:
        path = weights if kind == PYTORCH.name else _export(kind, weights, stem, settings, backend)
        if settings.test:
            return CheckRow(kind, path, file_megabytes(path), problem="exported, not scored (--test)")
        (row,) = check_files({kind: path}, settings.data, settings.imgsz, settings.batch_size, backend)
        return row
    except UserError as error:
        return CheckRow(kind, weights, 0.0, problem=cli.user_message(error))
    except Exception as error:  # a format that breaks is a row of the table, as in yolov5
        LOGGER.debug("%s failed", kind, exc_info=True)
        return CheckRow(kind, weights, 0.0, problem=f"failed: {type(error).__name__}: {str(error).splitlines()[0]}"
                        if str(error) else f"failed: {type(error).__name__}")


def _export(kind: str, weights: Path, stem: Path, settings: BenchmarkSettings, backend: backends.Backend) -> Path:
    """The file of format `kind`, written from `weights`; a UserError naming what is missing for it here."""
    soc_version = None
    if kind == "om":
        backend.offline_model_device()  # a UserError where this is no Ascend NPU
        soc_version = settings.soc_version or backend.device_name()
    export_settings = ExportSettings(imgsz=(settings.imgsz, settings.imgsz), batch_size=settings.batch_size,
                                     half=settings.half)
    written = write_formats(load_model(weights), (kind,), export_settings, stem, backend.device,
                            soc_version=soc_version)
    if kind not in written:  # om without atc on PATH
        raise UserError(f"{kind}: not written here (atc, CANN's model converter, is not on PATH)")
    return written[kind]


def _hard_fail(rows: list[CheckRow], floor: float | None) -> None:
    """--hard-fail: a UserError for the first failed row, or (with a floor) the first mAP50-95 not above it."""
    if floor is None:
        return
    for row in rows:
        if row.problem is not None and row.problem.startswith("failed:"):
            raise UserError(f"--hard-fail: {row.format} {row.problem}")
        if row.map50_95 is not None and not row.map50_95 > floor:
            raise UserError(f"--hard-fail {floor}: {row.format}'s mAP50-95 {row.map50_95:.4f} is not above it")


main = cli.main_for(parse_args, benchmark)
