"""The run folder runs/train/<name>/: the one owner of its layout (weights/last.pt, best.pt, epoch<N>.pt, config.yaml,
bad_files.txt); only the main rank writes in it."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import yaml

from detect.atomic_file import check_output_folder, make_folder, remove_file, write_text
from detect.config import Hyp
from detect.data import DataConfig, LabelledSplit
from detect.run_dir import make_run_dir
from detect.training.distributed import DistContext, broadcast_object
from detect.training.settings import TrainSettings

LOGGER = logging.getLogger(__name__)
CONFIG_FILE = "config.yaml"
RUN_WEIGHTS = "weights"  # the run folder's checkpoints (not models/weights.py's lookup folder for bare names)
LAST, BEST = "last.pt", "best.pt"


@dataclasses.dataclass(frozen=True)
class RunPlace:
    """Where a run's folder goes: project/name, that folder again (`exist_ok`: asked, or a resumed run) or the next
    free name (exp2, exp3, ...)."""

    project: str
    name: str
    exist_ok: bool = False


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """One run's folder; only the main rank writes in it."""

    save_dir: Path
    project: str  # the --project it is under, as given (the tracker's experiment)

    @property
    def weights_dir(self) -> Path:
        return self.save_dir / RUN_WEIGHTS

    @property
    def last_path(self) -> Path:
        return self.weights_dir / LAST

    @property
    def best_path(self) -> Path:
        return self.weights_dir / BEST

    def epoch_path(self, epoch: int) -> Path:
        """--save-period's snapshot after `epoch` epochs."""
        return self.weights_dir / f"epoch{epoch}.pt"

    @classmethod
    def open(cls, place: RunPlace, context: DistContext) -> RunFolder:
        """The main rank makes the run's folder at `place` and tells the other ranks."""
        check_output_folder(Path(place.project) / place.name, "run folder")  # every rank: none left waiting
        save_dir = None
        if context.is_main:
            save_dir = make_run_dir(place.project, place.name, place.exist_ok)
            make_folder(save_dir / RUN_WEIGHTS)
            for leftover in (save_dir / RUN_WEIGHTS).glob(".*.tmp"):  # a save killed half-way left its temp file
                remove_file(leftover)
        return cls(Path(broadcast_object(context, str(save_dir))), place.project)

    def write_config(self, settings: TrainSettings, hyp: Hyp, data: DataConfig, context: DistContext) -> Path:
        """config.yaml: the options, the hyp, the dataset as resolved, and the torchrun job it belongs to."""
        resolved = {
            "settings": settings.to_dict(),
            "hyp": dataclasses.asdict(hyp),
            "data": {"source": str(data.source), "root": str(data.root), "names": list(data.names),
                     "splits": {split: [str(path) for path in paths] for split, paths in data.splits.items()}},
            "job": {"run_id": context.run_id, "world_size": context.world_size},
        }
        return write_text(self.save_dir / CONFIG_FILE, yaml.safe_dump(resolved, sort_keys=False))

    def write_problems(self, problems: list[str], split: LabelledSplit) -> Path | None:
        """bad_files.txt: what the label check skipped or fixed, and the files that failed during the run."""
        check_lines = split.details_file.read_text().splitlines() if split.details_file else []
        if not check_lines and not problems:
            return None
        path = self.save_dir / "bad_files.txt"
        sections = [f"# label check ({len(check_lines)} lines, from {split.details_file})", *check_lines,
                    f"# during the run ({len(problems)} unreadable; training used other samples, validation left them out)",
                    *problems]
        write_text(path, "\n".join(sections) + "\n")
        if problems:
            LOGGER.warning("%d files could not be read during the run; see %s", len(problems), path)
        return path
