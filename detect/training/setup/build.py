"""Build a training run from its recipe (training/setup/recipe.py: the settings resolved once), reading no setting: the
labels checked and the loaders, the run folder, the model with its EMA and AutoAnchor's anchors, the AMP check, the
step's parts and schedule, a resumed run's state, validation, and what the main rank writes first; `build_run` returns
one frozen `Run` (training/run.py)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging

import numpy as np
import torch

from detect import backend as backends
from detect.backend.amp_check import amp_speed, check_amp, image_batch
from detect.data import DataConfig, ImageRecord, LabelledSplit, Loader, build_train_loader, build_val_loader, load_split
from detect.data.data_config import open_storage
from detect.data.dataset_plots import plot_label_stats
from detect.data.device_batch import multi_scale_sizes
from detect.data.images.ram_cache import NodeShare
from detect.data.storage.cache_places import cache_home
from detect.evaluation.evaluator import CocoEvaluator
from detect.inference.sample_images import sample_images
from detect.models import DetectionModel
from detect.models.transfer import autoanchor, freeze_layers
from detect.models.weights import model_from_state, restore_model_state
from detect.training.control import Control
from detect.training.distributed import DistContext, broadcast_object, gather_objects, main_rank_answer, patient_barrier
from detect.training.optim import IterationPlan, ModelEMA, build_scheduler, warmup_iterations
from detect.training.phase_times import PhaseTimes
from detect.training.results_log import ResultsLog
from detect.training.resume import Counters, TrainingCheckpoint, restore_rng_state
from detect.training.run import Run, Validation
from detect.training.run_folder import RunFolder
from detect.training.setup.recipe import PrecisionRequest, RunRecipe, SplitCheck
from detect.training.step import TrainingParts, build_parts, in_job

LOGGER = logging.getLogger(__name__)


def build_run(recipe: RunRecipe, phases: PhaseTimes) -> Run:
    """Everything a run needs, in order, from its recipe; `phases` times the label checks, the model and the plots."""
    context, point = recipe.context, recipe.point
    recipe.backend.seed(recipe.seed + context.rank)
    with phases.time("label check"):  # before the run folder
        train_loader = _train_loader(recipe)
    folder = RunFolder.open(recipe.folder, context)
    counters = point.checkpoint.counters if point else Counters()
    train_loader.start(counters.epoch, counters.batch)  # the workers prepare the first batches while the model is built
    with phases.time("model and AutoAnchor"):
        model, ema = _model_and_ema(recipe, train_loader)
    backend = _amp_checked(recipe.backend, model, recipe)
    parts = in_job(build_parts(model, backend, recipe.step, ema), context, recipe.sync_bn)
    scheduler = build_scheduler(parts.optimizer, recipe.step.optim, recipe.loop.epochs)
    if point:
        _restore(point.checkpoint, model, parts, scheduler)
    sizes = multi_scale_sizes(recipe.imgsz, model.max_stride) if recipe.multi_scale else None
    optim, batch_size = recipe.step.optim, recipe.step.batch_size
    plan = IterationPlan(optim, batch_size, warmup_iterations(optim, len(train_loader)), recipe.loop.epochs, sizes,
                         recipe.seed)
    with phases.time("label check"):
        validation = _validation(recipe, model, ema)
    results = ResultsLog(folder.save_dir, first_epoch=counters.epoch) if context.is_main else None
    if context.is_main:
        folder.write_config(recipe.settings, recipe.hyp, recipe.data, context)
        if recipe.label_plots:
            with phases.time("plots"):
                plot_label_stats(train_loader.records, train_loader.names, folder.save_dir / "labels.png")
    patient_barrier(context, "labels.png")  # the others wait here, not in the first step's collectives
    return Run(recipe.settings, recipe.hyp, recipe.loop, folder, train_loader, model, parts, plan, scheduler, counters,
               Control(), validation, results, phases, dict(point.checkpoint.tracking) if point else {})


def _checked_split(data: DataConfig, split: str, check: SplitCheck, context: DistContext) -> LabelledSplit:
    """This rank's check of `split`: each node's first rank checks it (writing the cache), then the others load it.
    A bucket's split on several nodes is checked once a job: by the main rank, whose label cache goes to the other
    nodes, so that a node fetches only the images its ranks read, not every image for the check."""
    data, storage = open_storage(data, check.cache_dir)
    checked = functools.partial(load_split, data, split, check.single_cls, check.cache_dir, check.bounds, storage)
    found = None
    if storage.check_once_per_job and context.local_world_size < context.world_size:
        if context.is_main:
            found = checked()
        patient_barrier(context, f"{split} labels/job")
        cache = found.cache_file if found is not None else None
        sent = broadcast_object(context, None if cache is None else (cache.name, cache.read_bytes()))
        if sent is not None and context.local_rank == 0 and not context.is_main:
            storage.keep_label_cache(*sent)
    for first in (True, False):  # each node's local rank 0, then the others
        if found is None and (context.local_rank == 0) == first:
            found = checked()
        patient_barrier(context, f"{split} labels/{'first' if first else 'others'}")
    states = gather_objects(context, found.cache_state)
    if context.distributed and context.is_main:
        by_state = {state: [str(rank) for rank, other in enumerate(states) if other == state] for state in states}
        LOGGER.info("%s labels: cache %s", split, "; ".join(
            f"{state} on rank{'s' * (len(ranks) > 1)} {', '.join(ranks)}" for state, ranks in by_state.items()))
    return found


def _train_loader(recipe: RunRecipe) -> Loader:
    """This rank's loader: the labels checked once a node (_checked_split), then every rank's image cache at once,
    the ranks of a node filling one --cache ram buffer together."""
    context = recipe.context
    checked = _checked_split(recipe.data, "train", recipe.split_check, context)
    share = NodeShare(context.local_rank, context.local_world_size, lambda name: patient_barrier(context, name),
                      f"{context.store.prefix.strip('/').replace('/', '-')}-train") if context.distributed else None
    return build_train_loader(checked, recipe.train_loading, share=share)


def _model_and_ema(recipe: RunRecipe, loader: Loader) -> tuple[DetectionModel, ModelEMA | None]:
    """The model on the device (and its EMA on the main rank): a new run's from its source with AutoAnchor's anchors,
    a resumed run's architecture from its checkpoint (its weights come back in _restore)."""
    point, context, backend = recipe.point, recipe.context, recipe.backend
    model = recipe.source.model if point is None else model_from_state(point.checkpoint.model, str(point.path))
    freeze_layers(model, recipe.freeze)
    model = model.to(backend.device)
    if backend.channels_last:
        model = model.to(memory_format=torch.channels_last)
    # The EMA is created before AutoAnchor and averages its way to the new anchors (docs/yolov5.md, "EMA").
    ema = ModelEMA(model) if context.is_main else None
    if recipe.anchors is not None and context.is_main:
        autoanchor(model, *_label_sizes(loader.records), recipe.anchors)
    # The others wait here, not in a collective under --dist-timeout; DDP's first broadcast then gives them the anchors.
    patient_barrier(context, "AutoAnchor")
    return model, ema


def _label_sizes(records: list[ImageRecord]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The images' (n, 2) pixel sizes and each image's boxes' normalised widths and heights, for AutoAnchor."""
    return (np.array([[record.width, record.height] for record in records], np.float64),
            [record.train_boxes[1][:, 2:4] for record in records])


def _restore(checkpoint: TrainingCheckpoint, model: DetectionModel, parts: TrainingParts,
             scheduler: torch.optim.lr_scheduler.LambdaLR) -> None:
    """Model, EMA, optimizer, scaler, scheduler, every RNG and a teacher's projectors as the checkpoint left them."""
    restore_model_state(model, checkpoint.model)
    if parts.distill is not None:
        parts.distill.restore(checkpoint.distill)
    if parts.ema is not None:
        restore_model_state(parts.ema.module, checkpoint.ema)
        parts.ema.updates = checkpoint.ema_updates
    parts.optimizer.load_state_dict(checkpoint.optimizer)
    parts.scaler.load_state_dict(checkpoint.scaler)
    scheduler.load_state_dict(checkpoint.scheduler)
    restore_rng_state(checkpoint.rng, parts.backend)


def _validation(recipe: RunRecipe, model: DetectionModel, ema: ModelEMA | None) -> Validation:
    """This rank's val loader shard (twice the rank's batch, as yolov5; the labels checked once a node:
    _checked_split) and weights; the main rank's evaluator."""
    loading = dataclasses.replace(recipe.val_loading, stride=model.max_stride)
    loader = build_val_loader(_checked_split(recipe.data, "val", recipe.split_check, recipe.context), loading)
    if ema is None:
        return Validation(loader, copy.deepcopy(model).eval().requires_grad_(False), None, recipe.slicing)
    return Validation(loader, ema.module, CocoEvaluator.for_split(loader.split), recipe.slicing)


def _amp_checked(backend: backends.Backend, model: DetectionModel, recipe: RunRecipe) -> backends.Backend:
    """AMP as it is on by default (accelerators; the CPU where the model's step times clearly faster under autocast:
    amp_speed) stays on only if the model's predictions on a bundled image agree with fp32 (check_amp); each asked on
    the main rank for the job; else one line, and fp32. --amp and --no-amp are obeyed. Then one line says the
    precision and why."""
    precision, context = recipe.precision, recipe.context
    why = ""
    if backend.amp_timed and precision.amp is None:
        amp = dataclasses.replace(precision, amp=True).backend()
        speed = main_rank_answer(context, "AMP timing", lambda: amp_speed(
            model, amp, recipe.loop.rank_batch, recipe.imgsz, cache_home(recipe.split_check.cache_dir)))
        backend, why = (amp, f"{speed}; --no-amp for fp32") if speed.faster else (backend, f"{speed}; --amp forces it")
    if not backend.amp_enabled or precision.amp is not None:
        _log_precision(backend, precision, why)
        return backend
    model.eval()  # on every rank; the main rank's alone is run
    check = main_rank_answer(context, "AMP check", lambda: check_amp(
        model.predict, image_batch(sample_images()[0], recipe.imgsz, backend.device), backend))
    model.train()
    if check.agrees:
        LOGGER.info("AMP check: autocast agrees with fp32 (%s)", check)
        _log_precision(backend, precision, why)
        return backend
    if context.is_main:  # the job's one verdict: one line, not one per rank
        LOGGER.warning("AMP check: autocast's predictions differ from fp32's (%s): training in fp32 (--amp forces "
                       "AMP)", check)
    fp32 = dataclasses.replace(precision, amp=False).backend()
    _log_precision(fp32, precision, f"the AMP check turned {backend.precision()} off; --amp forces it")
    return fp32


def _log_precision(backend: backends.Backend, precision: PrecisionRequest, why: str) -> None:
    """One line: the run's precision and why (`why`, else the flag or the backend's default), e.g. "precision: fp32
    (bf16 measured 0.46x fp32 on this CPU; --amp forces it)"."""
    if not why and precision.amp is not None:
        why = "--amp" if precision.amp else "--no-amp"
    elif not why:
        other = "--no-amp for fp32" if backend.amp_enabled else f"--amp for {backend.default_amp_dtype} autocast"
        why = f"{backend.amp_default_reason}; {other}"
    LOGGER.info("precision: %s (%s)", backend.precision(), why)
