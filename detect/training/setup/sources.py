"""What a training run reads before it is built, from the files its settings name (`SourceFiles`): the data yaml, its
train and val sources looked for, a new run's model built for the data's classes, and the teacher of --teacher.
training/setup/recipe.py asks for them once the job is joined and checks them against the settings and each other."""

from __future__ import annotations

import dataclasses

from detect.data import DataConfig, load_data_config
from detect.data.data_config import check_sources
from detect.data.labels.split import SINGLE_CLASS_NAME
from detect.models.transfer import ModelSource
from detect.training.distill import Teacher


@dataclasses.dataclass(frozen=True)
class SourceFiles:
    """The files a run reads, as its settings give them."""

    data: str
    cfg: str | None
    weights: str | None
    anchors_per_level: float  # the hyp's `anchors` (0: the architecture's)
    teacher: str | None
    single_cls: bool  # the model predicts one class, SINGLE_CLASS_NAME
    new_run: bool  # a resumed run's model is its checkpoint's: no model is read


@dataclasses.dataclass(frozen=True)
class Sources:
    """What the files held: the data yaml, the classes the model predicts, a new run's model, the teacher."""

    data: DataConfig
    names: list[str]
    student: ModelSource | None
    teacher: Teacher | None


def read_sources(files: SourceFiles) -> Sources:
    """The data yaml (each rank looks for its train and val sources), a new run's model for its classes (checked
    against the head before the labels are), the teacher read as safely as --weights; a bad file is one UserError."""
    data = load_data_config(files.data)
    names = [SINGLE_CLASS_NAME] if files.single_cls else list(data.names)
    student = ModelSource.read(files.cfg, files.weights, files.anchors_per_level, names) if files.new_run else None
    check_sources(data, ("train", "val"))
    teacher = Teacher.from_file(files.teacher) if files.teacher is not None else None
    return Sources(data, names, student, teacher)
