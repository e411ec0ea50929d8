"""The run folder runs/train/<name>/: created by rank 0, found again after an elastic restart, and its text files."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import yaml

from detect.config import Hyp
from detect.data import DataConfig, LabelledSplit
from detect.run_dir import make_run_dir
from detect.training.distributed import DistContext, broadcast_object
from detect.training.settings import TrainSettings

LOGGER = logging.getLogger(__name__)
CONFIG_FILE = "config.yaml"


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """Paths of one run; only rank 0 writes them."""

    save_dir: Path
    settings: TrainSettings
    context: DistContext

    @property
    def weights_dir(self) -> Path:
        return self.save_dir / "weights"

    @property
    def last_path(self) -> Path:
        return self.weights_dir / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.weights_dir / "best.pt"

    @classmethod
    def open(cls, settings: TrainSettings, context: DistContext, resume: bool) -> RunFiles:
        """Rank 0 makes project/name (exp, exp2, ... unless exist_ok or resuming) and tells the other ranks."""
        save_dir = None
        if context.is_main:
            save_dir = make_run_dir(settings.project, settings.name, settings.exist_ok or resume)
            (save_dir / "weights").mkdir(exist_ok=True)
            for leftover in (save_dir / "weights").glob(".*.tmp"):  # a save killed half-way left its temp file
                leftover.unlink()
        return cls(Path(broadcast_object(context, str(save_dir))), settings, context)

    @staticmethod
    def elastic_checkpoint(settings: TrainSettings, context: DistContext) -> Path | None:
        """After torchrun restarted the job (--max-restarts), the last.pt of this job's run folder, if any."""
        if context.restart_count == 0:
            return None
        folders = []
        for config in Path(settings.project).glob(f"*/{CONFIG_FILE}"):
            job = (yaml.safe_load(config.read_text()) or {}).get("job", {})
            if job.get("run_id") == context.run_id and (config.parent / "weights" / "last.pt").is_file():
                folders.append(config.parent)
        if not folders:
            LOGGER.warning("restart %d of job %r: no last.pt of this job yet, starting again", context.restart_count,
                           context.run_id)
            return None
        latest = max(folders, key=lambda folder: (folder / "weights" / "last.pt").stat().st_mtime)
        LOGGER.info("restart %d of job %r: resuming from %s", context.restart_count, context.run_id, latest)
        return latest / "weights" / "last.pt"

    def write_config(self, hyp: Hyp, data: DataConfig) -> Path:
        """config.yaml: the options, the hyp, the dataset as resolved, and the torchrun job it belongs to."""
        resolved = {
            "settings": self.settings.to_dict(),
            "hyp": dataclasses.asdict(hyp),
            "data": {"source": str(data.source), "root": str(data.root), "names": list(data.names),
                     "splits": {split: [str(path) for path in paths] for split, paths in data.splits.items()}},
            "job": {"run_id": self.context.run_id, "world_size": self.context.world_size},
        }
        path = self.save_dir / CONFIG_FILE
        path.write_text(yaml.safe_dump(resolved, sort_keys=False))
        return path

    def write_problems(self, problems: list[str], split: LabelledSplit) -> Path | None:
        """bad_files.txt: what the label check skipped or fixed, and the files that failed during the run."""
        check_lines = split.details_file.read_text().splitlines() if split.details_file else []
        if not check_lines and not problems:
            return None
        path = self.save_dir / "bad_files.txt"
        sections = [f"# label check ({len(check_lines)} lines, from {split.details_file})", *check_lines,
                    f"# during the run ({len(problems)} unreadable; training used other samples, validation left them out)",
                    *problems]
        path.write_text("\n".join(sections) + "\n")
        if problems:
            LOGGER.warning("%d files could not be read during the run; see %s", len(problems), path)
        return path
