"""The Trainer: set a run up, then epoch by epoch train, validate, log and save. `fit` is the table of contents."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from detect import backend as backends
from detect.backend.profiler import ProfileSchedule, find_trace, format_summary, summarize
from detect.config import Hyp, from_mapping, load_hyp
from detect.data import Batch, Loader, build_train_loader, build_val_loader, load_data_config
from detect.data.augment.settings import AugmentSettings
from detect.data.categories import is_coco
from detect.data.device_batch import multi_scale_sizes
from detect.data.loader import default_workers
from detect.data.plots import plot_batch, plot_label_stats
from detect.errors import UserError
from detect.evaluation.evaluator import Metrics
from detect.evaluation.loop import EvalSettings, build_evaluator, evaluate
from detect.evaluation.outputs import ValOutputs
from detect.evaluation.report import metrics_table
from detect.inference.model import TorchInference
from detect.models.checkpoint import load_checkpoint, save_checkpoint
from detect.models.weights import load_model, model_state
from detect.training.checkpoints import RunFiles
from detect.training.distributed import (
    DistContext,
    barrier,
    broadcast_object,
    destroy_process_group,
    gather_objects,
    init_process_group,
    replicas_in_sync,
)
from detect.training.ema import ModelEMA
from detect.training.loop import EpochStats, StepParts, train_one_epoch
from detect.training.loss import DetectionLoss, LossSettings
from detect.training.model import autoanchor, build_train_model, freeze_layers
from detect.training.optim import OptimSettings, build_optimizer, build_scheduler, lr_lambda, warmup_iterations
from detect.training.results import ResultsLog, epoch_line, epoch_row
from detect.training.settings import TrainSettings
from detect.training.state import (
    Progress,
    build_payload,
    latest_last_checkpoint,
    restore_rng_state,
    resumable,
    rng_state,
)

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FitResult:
    """Where a finished run left its files, and the final evaluation of its best weights (rank 0 only)."""

    save_dir: Path
    best: Path | None
    last: Path | None
    metrics: Metrics | None
    epochs_run: int


def select_backend(settings: TrainSettings, context: DistContext) -> backends.Backend:
    """The device for this rank: under torchrun an accelerator's index is LOCAL_RANK, whatever --device says."""
    kind, _ = backends.parse_spec(settings.device)
    spec = settings.device
    if context.distributed and kind != "cpu":
        kind = backends.select(kind, amp=False).name if kind == "auto" else kind
        spec = kind if kind == "cpu" else f"{kind}:{context.local_rank}"
    return backends.select(spec, amp=settings.amp, npu_jit_compile=settings.npu_jit_compile,
                           npu_allow_hf32=settings.npu_allow_hf32)


class Trainer:
    """One training run; every rank builds one, rank 0 alone evaluates and writes."""

    def __init__(self, settings: TrainSettings, context: DistContext | None = None, resume: bool | str = False,
                 resume_overrides: dict | None = None, profile: ProfileSchedule | None = None) -> None:
        """resume: False, True (the latest runs/<project>/*/weights/last.pt) or a checkpoint path; a resumed run
        takes its stored settings, with `resume_overrides` (e.g. device, workers) replacing some. profile: record
        these steps of this process's first epoch on rank 0 (--profile)."""
        self.context = context or DistContext.from_env()
        self.settings, self.resume, self.resume_overrides = settings, resume, resume_overrides or {}
        self.profile = profile
        self.problems: list[str] = []

    def fit(self) -> FitResult:
        """Train settings.epochs epochs (from where a resumed run stopped); returns where the results are."""
        self.setup()
        try:
            for epoch in range(self.progress.epoch, self.settings.epochs):
                with self.batch_hook(epoch) as on_batch:
                    stats = train_one_epoch(self.parts, self.train_loader, epoch, self.settings.epochs, self.progress,
                                            show_progress=self.context.is_main and self.settings.progress,
                                            on_batch=on_batch)
                self.scheduler.step()
                metrics = self.validate(epoch)
                self.end_epoch(epoch, stats, metrics)
                if broadcast_object(self.context, self.should_stop(epoch)):
                    break
            return self.finish()
        finally:
            destroy_process_group(self.context)

    # --- set-up ---------------------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Device, process group, run folder, data, model, optimizer and loaders; restored state on resume."""
        self._check_batch_size()  # before the process group: a bad flag must not leave ranks waiting
        payload = self._resume_payload()
        self._check_batch_size()  # again: a resumed run takes its stored batch size
        if self.settings.cfg is None and self.settings.weights is None:
            raise UserError("give a model: --cfg yolov5s.yaml (from scratch) and/or --weights FILE (fine-tune)")
        self.data = load_data_config(self.settings.data)  # bad yamls stop here, before any folder is made
        self.hyp = self._hyp(payload)
        self.backend = select_backend(self.settings, self.context)
        if self.settings.sync_bn and self.backend.device.type == "cpu":
            raise UserError("--sync-bn needs GPUs or NPUs: torch's SyncBatchNorm does not run on the CPU")
        self.backend.set_device()
        init_process_group(self.context, self.backend.distributed_backend, self.settings.dist_timeout)
        resumed_epoch = payload["progress"]["epoch"] if payload is not None else -1
        if broadcast_object(self.context, resumed_epoch) != resumed_epoch:
            raise UserError("the ranks found different checkpoints to resume from: every node must see the run "
                            "folder (shared storage)")
        self.backend.seed(self.settings.seed + self.context.rank)
        self.files = RunFiles.open(self.settings, self.context, resume=payload is not None)
        self.train_loader = self._train_loader()
        self._build_model(payload)
        self._build_optimization()
        self.progress = Progress()
        if payload is not None:
            self._restore(payload)
        self.first_epoch = self.progress.epoch
        self._build_step_parts()
        if self.context.is_main:
            self.val_loader = build_val_loader(self.data, "val", self.settings.imgsz, 2 * self.batch_per_rank,
                                               self.workers, stride=int(self.model.stride.max()),
                                               pin_memory=self.backend.device.type != "cpu",
                                               single_class=self.settings.single_cls)
            self.evaluator = build_evaluator(self.val_loader.split)
            self.results = ResultsLog(self.files.save_dir, first_epoch=self.progress.epoch)
            self.files.write_config(self.hyp, self.data)
            if payload is None:
                plot_label_stats(self.train_loader.records, self.train_loader.names, self.files.save_dir / "labels.png")

    def _check_batch_size(self) -> None:
        world = self.context.world_size
        if self.settings.batch_size % world:
            raise UserError(f"--batch-size {self.settings.batch_size} does not divide over {world} ranks")
        self.batch_per_rank = self.settings.batch_size // world
        # As yolov5: no more loader workers per rank than its share of the cores, nor than its batch.
        self.workers = min(self.settings.workers, default_workers(world), self.batch_per_rank)

    def _resume_payload(self) -> dict | None:
        """The checkpoint this run continues from (--resume, or the job's last.pt after an elastic restart); every
        rank reads it itself, so a job on several nodes needs the run folder on shared storage."""
        if self.resume is True:
            path = latest_last_checkpoint(Path(self.settings.project))
        elif self.resume:
            path = Path(self.resume)
        else:
            path = RunFiles.elastic_checkpoint(self.settings, self.context)
        if path is None:
            return None
        payload = resumable(load_checkpoint(path), path)
        stored = TrainSettings.from_dict(payload["config"]["settings"], f"{path} (stored settings)")
        if payload["progress"]["epoch"] >= stored.epochs:
            raise UserError(f"{path}: the run already finished its {stored.epochs} epochs; nothing to resume")
        self.settings = dataclasses.replace(stored, **self.resume_overrides, exist_ok=True,
                                            project=str(path.parent.parent.parent), name=path.parent.parent.name)
        LOGGER.info("resuming %s from epoch %d", path, payload["progress"]["epoch"] + 1)
        return payload

    def _hyp(self, payload: dict | None) -> Hyp:
        if payload is not None:
            return from_mapping(Hyp, payload["config"]["hyp"], "the checkpoint's stored hyp")
        return load_hyp(self.settings.hyp)

    def _train_loader(self) -> Loader:
        """This rank's loader; rank 0 checks the labels first so the others read its cache."""
        loaders = []
        for turn in (True, False):  # rank 0's turn, then everyone else's
            if self.context.is_main == turn:
                loaders.append(build_train_loader(
                    self.data, AugmentSettings.from_hyp(self.hyp), self.settings.imgsz, self.batch_per_rank,
                    self.workers, self.settings.seed, rank=self.context.rank,
                    world_size=self.context.world_size,
                    cache=self.settings.cache, pin_memory=self.backend.device.type != "cpu",
                    single_class=self.settings.single_cls, rect=self.settings.rect))
            barrier(self.context)
        return loaders[0]

    def _build_model(self, payload: dict | None) -> None:
        """Model (and EMA on rank 0) on the device; AutoAnchor before the first epoch; DDP around it."""
        settings = self.settings
        model = build_train_model(settings.cfg, settings.weights if payload is None else None, self.train_loader.names)
        freeze_layers(model, settings.freeze)
        model = model.to(self.backend.device)
        if self.backend.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        # The EMA is created before AutoAnchor and averages its way to the new anchors (YOLOV5-FACTS.md).
        self.ema = ModelEMA(model) if self.context.is_main else None
        if payload is None and self.context.is_main and not settings.noautoanchor:
            autoanchor(model, self.train_loader.records, settings.imgsz, self.hyp.anchor_t, settings.seed)
        self.train_model = model
        if settings.sync_bn and not self.context.distributed:
            LOGGER.warning("--sync-bn does nothing in a single process (launch with torchrun)")
        if self.context.distributed:
            if settings.sync_bn:
                self.train_model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
            # DDP broadcasts rank 0's parameters and buffers (the AutoAnchor result included) to every rank.
            device_ids = None if self.backend.device.type == "cpu" else [self.backend.device.index]
            self.train_model = DistributedDataParallel(self.train_model, device_ids=device_ids)

    def _build_optimization(self) -> None:
        settings, hyp = self.settings, self.hyp
        self.optim_settings = OptimSettings.from_hyp(hyp, settings.optimizer, settings.cos_lr)
        self.optimizer = build_optimizer(self.model, self.optim_settings, settings.batch_size)
        self.scheduler = build_scheduler(self.optimizer, self.optim_settings, settings.epochs)
        self.scaler = self.backend.grad_scaler(init_scale=hyp.amp_init_scale, growth_factor=hyp.amp_growth_factor,
                                               growth_interval=hyp.amp_growth_interval)
        loss_settings = LossSettings.from_hyp(hyp, self.model.detect.nl, self.model.nc, settings.imgsz,
                                              settings.label_smoothing)
        self.criterion = DetectionLoss(loss_settings, self.model.detect.anchors, self.model.nc)

    def _restore(self, payload: dict) -> None:
        """Model, EMA, optimizer, scaler, scheduler, counters and every RNG, as the checkpoint left them."""
        self.model.load_state_dict(payload["model"]["state_dict"])
        if self.ema is not None:
            self.ema.module.load_state_dict(payload["ema"]["state_dict"])
            self.ema.updates = int(payload["ema"]["updates"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scaler.load_state_dict(payload["scaler"])
        self.scheduler.load_state_dict(payload["scheduler"])
        self.progress = Progress(**payload["progress"])
        restore_rng_state(payload["rng"], self.backend)

    def _build_step_parts(self) -> None:
        settings = self.settings
        sizes = multi_scale_sizes(settings.imgsz, int(self.model.stride.max())) if settings.multi_scale else None
        self.parts = StepParts(
            model=self.train_model, criterion=self.criterion, optimizer=self.optimizer, scaler=self.scaler,
            ema=self.ema, backend=self.backend, context=self.context, optim_settings=self.optim_settings,
            global_batch=settings.batch_size,
            warmup_iterations=warmup_iterations(self.optim_settings, len(self.train_loader)),
            lr_factor=lr_lambda(self.optim_settings, settings.epochs), multi_scale_sizes=sizes,
            seed=settings.seed, channels_last=self.backend.channels_last)

    # --- each epoch -----------------------------------------------------------------------------------------------
    def plot_first_batches(self, index: int, batch) -> None:
        """train_batch0..2.jpg: what the network sees after augmentation (rank 0, first epoch of this process)."""
        if self.context.is_main and index < 3:
            plot_batch(batch, self.train_loader.names, self.files.save_dir / f"train_batch{index}.jpg")

    @contextlib.contextmanager
    def batch_hook(self, epoch: int) -> Iterator[Callable[[int, Batch], None] | None]:
        """train_one_epoch's on_batch: in the first epoch the batch plots and, with --profile, the profiler's step
        (rank 0); the profiler ends with the epoch, so validation stays out of the trace, and its summary is logged."""
        if epoch != self.first_epoch:
            yield None
            return
        if self.profile is None or not self.context.is_main:
            yield self.plot_first_batches
            return
        folder = self.files.save_dir / "profile"
        with self.backend.profiler(folder, self.profile) as profiler:
            def on_batch(index: int, batch: Batch) -> None:
                self.plot_first_batches(index, batch)  # plots fall in waiting steps, before any recorded one
                profiler.step()

            yield on_batch
        try:
            LOGGER.info("%s", format_summary(summarize(find_trace(folder))))
        except UserError as error:  # a first epoch shorter than the schedule records nothing; training goes on
            LOGGER.warning("--profile: %s (the schedule needs %d)", error, self.profile.steps)

    def validate(self, epoch: int) -> Metrics | None:
        """COCO metrics of the EMA weights on rank 0 (every epoch, or only the last with --noval)."""
        final = epoch + 1 == self.settings.epochs
        if not self.context.is_main or (self.settings.noval and not final):
            return None
        self.evaluator.reset()
        with self.backend.autocast():  # fp16 on accelerators when AMP is on, as yolov5 validates during training
            result = evaluate(self.ema.module.predict, self.val_loader, self.backend, self.evaluator, EvalSettings(),
                              progress=self.settings.progress)
        self.problems.extend(result.problems)
        return result.metrics

    def end_epoch(self, epoch: int, stats: EpochStats, metrics: Metrics | None) -> None:
        """Gather problems, log the epoch's row, save last/best/periodic checkpoints (rank 0 writes)."""
        problems = gather_objects(self.context, stats.problems)
        self.progress.epoch = epoch + 1
        if not self.context.is_main:
            return
        for rank_problems in problems:
            self.problems.extend(rank_problems)
        fitness = metrics.fitness if metrics is not None else 0.0
        if fitness >= self.progress.best_fitness:  # ties go to the later epoch (YOLOV5-FACTS.md)
            self.progress.best_fitness, self.progress.best_epoch = fitness, epoch
        device_peak = None if self.backend.device.type == "cpu" else self.backend.memory_stats().peak_bytes
        row = epoch_row(epoch, stats, metrics, backends.host_memory_stats().peak_bytes, device_peak)
        self.results.add(row)
        LOGGER.info("%s", epoch_line(epoch, self.settings.epochs, row))
        self.save_checkpoints(epoch)
        self.backend.reset_peak_memory()

    def save_checkpoints(self, epoch: int) -> None:
        """last.pt every epoch (only the final one with --nosave), best.pt on a new best, epoch<N>.pt by period."""
        settings, files = self.settings, self.files
        final = epoch + 1 == settings.epochs
        if settings.nosave and not final:
            return
        save_checkpoint(files.last_path, self.checkpoint(full=True))
        weights_only = self.checkpoint(full=False)
        if self.progress.best_epoch == epoch:
            save_checkpoint(files.best_path, weights_only)
        if settings.save_period > 0 and (epoch + 1) % settings.save_period == 0:
            save_checkpoint(files.weights_dir / f"epoch{epoch + 1}.pt", weights_only)

    def checkpoint(self, full: bool) -> dict:
        """The checkpoint dict; `full` adds what resuming needs (optimizer, scaler, scheduler, every RNG)."""
        config = {"settings": self.settings.to_dict(), "hyp": dataclasses.asdict(self.hyp)}
        return build_payload(
            model=model_state(self.model), ema={**model_state(self.ema.module), "updates": self.ema.updates},
            optimizer=self.optimizer.state_dict() if full else None,
            scaler=self.scaler.state_dict() if full else None,
            scheduler=self.scheduler.state_dict() if full else None,
            rng=rng_state(self.backend) if full else None, progress=self.progress, config=config)

    def should_stop(self, epoch: int) -> bool:
        """Early stopping: `patience` epochs without a better fitness (0 turns it off)."""
        patience = self.settings.patience
        stop = bool(patience) and self.context.is_main and epoch - self.progress.best_epoch >= patience
        if stop:
            LOGGER.info("stopping early: no improvement for %d epochs (best: epoch %d)", patience,
                        self.progress.best_epoch + 1)
        return stop

    def finish(self) -> FitResult:
        """Final evaluation of the best weights, plots and the bad-file summary (rank 0)."""
        epochs_run = self.progress.epoch - self.first_epoch
        files = self.files
        # Parameters only: BatchNorm statistics are rank 0's after DDP's broadcast, then each rank's own batch.
        if self.context.distributed and not replicas_in_sync(self.context, self.model.parameters()):
            LOGGER.warning("the %d ranks ended with different parameters", self.context.world_size)
        elif self.context.distributed:
            LOGGER.info("all %d ranks hold identical parameters", self.context.world_size)
        if not self.context.is_main:
            return FitResult(files.save_dir, None, None, None, epochs_run)
        self.results.plot()
        self.results.close()
        weights = files.best_path if files.best_path.is_file() else files.last_path
        metrics = self.final_evaluation(weights) if weights.is_file() else None
        files.write_problems(self.problems, self.train_loader.split)
        LOGGER.info("results saved to %s", files.save_dir)
        return FitResult(files.save_dir, files.best_path if files.best_path.is_file() else None,
                         files.last_path if files.last_path.is_file() else None, metrics, epochs_run)

    def final_evaluation(self, weights: Path) -> Metrics:
        """`weights` fused, in fp32, NMS IoU 0.65 on COCO (the published numbers) else 0.6; PR, confusion, predictions."""
        model = TorchInference(load_model(weights), self.backend)
        split = self.val_loader.split
        settings = EvalSettings(iou_threshold=0.65 if is_coco(split.names) else 0.6)
        outputs = ValOutputs(self.files.save_dir, split, save_txt=False, save_conf=False, plots=True)
        self.evaluator.reset()
        result = evaluate(model, self.val_loader, self.backend, self.evaluator, settings,
                          progress=self.settings.progress, on_image=outputs.add)
        outputs.finish(result.metrics)
        LOGGER.info("%s (%d images)\n%s", weights, result.images, metrics_table(result.metrics, per_class=True))
        return result.metrics
