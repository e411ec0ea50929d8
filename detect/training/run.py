"""What a training run is once set up (`Run`, which build.py fills and the trainer, the hooks and the trackers read):
its settings, folder, model, step parts, counters and the hooks' control, its validation, its results log
(results_log.py) and the wall time of each phase (phase_times.py)."""

from __future__ import annotations

import dataclasses

import torch

from detect import backend as backends
from detect.config import Hyp
from detect.data import Loader
from detect.evaluation.evaluator import CocoEvaluator
from detect.evaluation.val_loop import Predict
from detect.inference.predictor import Predictor
from detect.inference.slicing import SlicedPredictor, SliceSettings
from detect.models import DetectionModel
from detect.models.safe_io import save_checkpoint
from detect.models.weights import model_state
from detect.training.control import Control
from detect.training.distributed import DistContext
from detect.training.optim import IterationPlan
from detect.training.phase_times import PhaseTimes
from detect.training.results_log import ResultsLog
from detect.training.resume import Counters, TrainingCheckpoint, rng_state
from detect.training.run_folder import RunFolder
from detect.training.settings import TrainSettings
from detect.training.setup.recipe import LoopRecipe
from detect.training.step import TrainingParts


@dataclasses.dataclass(frozen=True)
class Validation:
    """What validates the run on each rank: its shard of the val batches, the weights it scores (the main rank's EMA
    module; a copy on the other ranks, which the main rank's EMA weights are sent to before each validation), and on
    the main rank alone the COCO evaluator."""

    loader: Loader
    model: DetectionModel
    evaluator: CocoEvaluator | None
    slicing: SliceSettings | None = None  # a tiled run's: the weights run on windows of each full-resolution image

    def predict(self, backend: backends.Backend, weights: Predict | None = None) -> Predict:
        """What scores the weights (the run's, else `weights`, e.g. best.pt's fused model): their predict, or
        (slicing) windows of each image run through it."""
        predict = self.model.predict if weights is None else weights
        if self.slicing is None:
            return predict
        return SlicedPredictor(Predictor(predict), backend, self.slicing, self.model.max_stride)


@dataclasses.dataclass(frozen=True)
class Run:
    """What one training run holds once set up, on every rank; `parts.ema` and `results` on the main rank only."""

    settings: TrainSettings  # as checkpoints and trackers keep them
    hyp: Hyp
    loop: LoopRecipe  # what the loop, the evaluations and the hooks follow
    folder: RunFolder
    train_loader: Loader
    model: DetectionModel  # what checkpoints save; the steps call parts.train_model (DDP around it under torchrun)
    parts: TrainingParts
    plan: IterationPlan
    scheduler: torch.optim.lr_scheduler.LambdaLR
    counters: Counters  # where the run stands: the epoch loop and the trainer advance them, last.pt keeps them
    control: Control  # what the hooks ask of the loop (stop, save, end the run)
    validation: Validation
    results: ResultsLog | None  # results.csv, written by the main rank
    phases: PhaseTimes
    tracking: dict[str, str] = dataclasses.field(default_factory=dict)  # experiment trackers' ids, kept in last.pt

    @property
    def backend(self) -> backends.Backend:
        """This rank's device (the steps' own: parts.backend)."""
        return self.parts.backend

    @property
    def context(self) -> DistContext:
        """This rank in its job (the steps' own: parts.context)."""
        return self.parts.context

    def checkpoint(self, full: bool) -> TrainingCheckpoint:
        """The run as a checkpoint; `full` adds what resuming needs (optimizer, scaler, scheduler, every RNG, the
        projectors of a run with a teacher: best.pt holds the student alone)."""
        ema, parts = self.parts.ema, self.parts
        trained = self.loop.trained  # what val, predict and export default to
        return TrainingCheckpoint(
            model=model_state(self.model, trained), ema=model_state(ema.module, trained), ema_updates=ema.updates,
            counters=self.counters, settings=self.settings, hyp=self.hyp,
            optimizer=parts.optimizer.state_dict() if full else None, scaler=parts.scaler.state_dict() if full else None,
            scheduler=self.scheduler.state_dict() if full else None, rng=rng_state(self.backend) if full else None,
            tracking=dict(self.tracking) if full else {},
            distill=parts.distill.state() if full and parts.distill is not None else None)

    def save_last(self) -> None:
        """last.pt: the run where the counters stand, with all a resume needs (main rank)."""
        save_checkpoint(self.folder.last_path, self.checkpoint(full=True).to_payload())
