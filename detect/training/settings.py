"""What a training run was asked to do: yolov5's train.py options as one frozen, checked dataclass, the one home of
their names, defaults, ranges and help; the train CLI's flags and the Python API are made from it; and what --resume
asks for. Their checks against the model, the job, the device and the data are training/setup/recipe.py's."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from detect.backend import NMS_DEVICE_HELP, NMS_DEVICES, NPU_ALLOW_HF32_HELP, NPU_JIT_COMPILE_HELP, SPEC_HELP
from detect.backend.placement import AFFINITY_HELP, check_affinity
from detect.config import MAX_IMGSZ, NON_NEGATIVE, POSITIVE, Bound, Settings, option, options_from_dict
from detect.data.images.cache import CACHE_CHOICES
from detect.data.images.pixels import DEFAULT_MAX_PIXELS, MAX_PIXELS, MAX_PIXELS_HELP
from detect.data.labels.check import DEFAULT_MAX_BOXES, MAX_BOXES, MAX_BOXES_HELP
from detect.data.storage.cache_places import CACHE_DIR_HELP
from detect.data.tiles.windows import DEFAULT_MAX_WINDOWS, MAX_WINDOWS_HELP, OVERLAP
from detect.errors import UserError
from detect.run_dir import check_run_folder
from detect.training.distill.teacher import MODES

LOGGER = logging.getLogger(__name__)
# at least the largest stride; at most MAX_IMGSZ
TRAIN_IMAGE_SIZE = Bound(f"an integer in [32, {MAX_IMGSZ}]", lambda value: 32 <= value <= MAX_IMGSZ)
SMOOTHING = Bound("a number in [0, 1)", lambda value: 0 <= value < 1)
POSITIVE_SECONDS = Bound("a number > 0", lambda value: value > 0)
NOT_NEGATIVE = Bound("a number >= 0", lambda value: value >= 0)
AUTO_BATCH = -1  # --batch-size -1: AutoBatch (detect/backend/autobatch.py)
BATCH = Bound("a positive integer, or -1 (AutoBatch)", lambda value: value >= 1 or value == AUTO_BATCH)
TILE = Bound(f"0 (off) or an integer in [32, {MAX_IMGSZ}]", lambda value: value == 0 or 32 <= value <= MAX_IMGSZ)


@dataclasses.dataclass(frozen=True)
class TrainSettings(Settings):
    """The options of `python -m detect.train` and `detect.train.run`, with yolov5's names and defaults."""

    cfg: str | None = option(None, "model yaml: a bare name in configs/models/ or a path (from scratch)")
    weights: str | None = option(None, "initial weights: ours or an ultralytics/yolov5 .pt (fine-tuning)")
    teacher: str | None = option(None, "knowledge distillation: a trained model (ours or an ultralytics/yolov5 .pt, "
                                       "the same classes and levels) that teaches this one; it runs frozen beside it",
                                 again_on_resume=True)
    distill: str | None = option(None, "what the teacher teaches: feature (the maps its head reads; default), logit "
                                       "(its head's outputs) or both", choices=MODES)
    distill_weight: float | None = option(None, "the distillation term's gain (default: the hyp's distill)",
                                          bound=NOT_NEGATIVE)
    data: str = option("shapes.yaml", "data yaml; shapes.yaml is the built-in dataset")
    hyp: str = option("scratch-low.yaml", "hyper-parameter yaml: a bare name in configs/hyps/ or a path")
    epochs: int = option(100, bound=POSITIVE)
    batch_size: int = option(16, "total batch size over all ranks; -1: the largest that fits 60%% of the device's free "
                                "memory (AutoBatch, one device)", bound=BATCH)
    imgsz: int = option(640, "train and val image size", bound=TRAIN_IMAGE_SIZE,
                        flags=("--imgsz", "--img", "--img-size"))
    device: str = option("auto", SPEC_HELP + "; under torchrun the index is LOCAL_RANK",
                         again_on_resume=True)
    workers: int = option(8, "data loader workers per rank", bound=NON_NEGATIVE, again_on_resume=True)
    project: str = option("runs/train", "runs go to project/name")
    name: str = option("exp")
    exist_ok: bool = option(False, "reuse project/name instead of a new one")
    seed: int = option(0, "seed of the data order, augmentation and init", bound=NON_NEGATIVE)
    noval: bool = option(False, "validate only after the final epoch")
    nosave: bool = option(False, "save only the final checkpoint")
    noplots: bool = option(False, "no plots (labels, training batches, results, PR curves, confusion matrix)")
    noautoanchor: bool = option(False, "keep the model's anchors (no AutoAnchor check)")
    patience: int = option(100, "stop after this many epochs without improvement (0: never)", bound=NON_NEGATIVE)
    freeze: tuple[int, ...] = option((0,), "freeze the first N layers, or the listed layers", bound=NON_NEGATIVE)
    save_period: int = option(-1, "also save weights/epoch<N>.pt every N epochs")
    save_minutes: float = option(0.0, "also save last.pt inside an epoch every M minutes (0: at epoch ends only)",
                                 bound=NOT_NEGATIVE, again_on_resume=True)
    cos_lr: bool = option(False, "cosine learning-rate schedule (default linear)")
    label_smoothing: float = option(0.0, bound=SMOOTHING)
    multi_scale: bool = option(False, "vary the image size per batch over a fixed set of sizes")
    sync_bn: bool = option(False, "synchronised BatchNorm across ranks (accelerators, DDP only)")
    optimizer: str = option("SGD", choices=("SGD", "Adam", "AdamW"))
    cache: str | None = option(None, "decoded images in RAM (--cache, --cache ram) or as .npy beside the images "
                                     "(--cache disk)", choices=CACHE_CHOICES, const="ram")
    cache_dir: str | None = option(None, CACHE_DIR_HELP + "; also --cache disk's .npy files", again_on_resume=True)
    max_pixels: int = option(DEFAULT_MAX_PIXELS, MAX_PIXELS_HELP, bound=MAX_PIXELS)
    max_boxes: int = option(DEFAULT_MAX_BOXES, MAX_BOXES_HELP, bound=MAX_BOXES)
    tile: int | None = option(None, "train on overlapping windows of this many pixels of each image, labels clipped "
                                    "to each (small objects in large images); default: the data yaml's tile: size; "
                                    "0: off", bound=TILE)
    tile_overlap: float | None = option(None, "windows' overlap, a share of --tile (default: the data yaml's, else "
                                              "0.2)", bound=OVERLAP)
    max_windows: int = option(DEFAULT_MAX_WINDOWS, MAX_WINDOWS_HELP, bound=POSITIVE)
    single_cls: bool = option(False, "train every class as one class, 'item'")
    rect: bool = option(False, "rectangular batches in aspect-ratio order (no mosaic; many shapes)")
    amp: bool | None = option(None, "mixed precision (default: on for accelerators; on the CPU bf16 where the model's "
                                         "step times clearly faster in it than in fp32, kept in the cache folder)")
    npu_jit_compile: bool | None = option(None, NPU_JIT_COMPILE_HELP)
    npu_allow_hf32: bool | None = option(None, NPU_ALLOW_HF32_HELP)
    nms_device: str = option("device", NMS_DEVICE_HELP + "; for the validation during training",
                             choices=NMS_DEVICES, again_on_resume=True)
    cpu_affinity: str = option("auto", AFFINITY_HELP, again_on_resume=True)
    dist_timeout: float = option(1800.0, "seconds any collective may wait (torchrun jobs)", bound=POSITIVE_SECONDS)
    progress: bool = option(True, "progress bars (--no-progress: one line per epoch only)", flags=("--no-progress",),
                            again_on_resume=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_run_folder(self.project, self.name)
        check_affinity(self.cpu_affinity)
        if self.rect and self.multi_scale:
            raise UserError("--rect and --multi-scale do not go together: a rectangular batch has its own shape")
        if self.teacher is None and (self.distill is not None or self.distill_weight is not None):
            raise UserError("--distill and --distill-weight choose how a teacher teaches: give --teacher T.pt")

    def to_dict(self) -> dict[str, Any]:
        """Plain values only (a checkpoint and the run's yaml hold this)."""
        values = dataclasses.asdict(self)
        values["freeze"] = list(self.freeze)
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str) -> TrainSettings:
        """Rebuild from to_dict's output or keyword arguments; an unknown key or a wrong type names it and `source`."""
        return options_from_dict(cls, values, source)


def resume_fields() -> tuple[str, ...]:
    """The settings a resumed run may take anew (machine-specific); the rest come from its checkpoint."""
    return tuple(field.name for field in dataclasses.fields(TrainSettings) if field.metadata["again_on_resume"])


@dataclasses.dataclass(frozen=True)
class Resume:
    """What --resume asks for, one of three: a new run (NEW_RUN; a torchrun job restarted by --max-restarts still
    resumes its own run), the newest weights/last.pt of --project (NEWEST_RUN), or the run folder or last.pt at
    `path`."""

    path: Path | None = None
    newest: bool = False

    @property
    def asked(self) -> bool:
        """Whether --resume was given: the run continues a checkpoint, its stored settings with it."""
        return self.newest or self.path is not None

    @classmethod
    def parse(cls, value: bool | str | os.PathLike | None) -> Resume:
        """--resume as the CLI and train.run(resume=...) take it: False or None (a new run), True (a bare --resume:
        the newest run), or a path."""
        if value is True:
            return NEWEST_RUN
        return Resume(path=Path(value)) if value else NEW_RUN


NEW_RUN, NEWEST_RUN = Resume(), Resume(newest=True)
