"""Set a training run up, top to bottom: backend and process group, resume point (a resumed run's own backend), loaders,
run folder, model, optimizer and schedule, restored state; `build_run` returns one frozen `Run` (training/run.py)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from typing import Any

import numpy as np
import torch

from detect import backend as backends
from detect.backend.amp_check import amp_speed, check_amp, image_batch
from detect.backend.autobatch import fit_batch_size
from detect.config import Hyp, load_hyp
from detect.data import (
    AugmentSettings,
    DataConfig,
    ImageRecord,
    LabelledSplit,
    Loader,
    TrainLoaderSettings,
    ValLoaderSettings,
    build_train_loader,
    build_val_loader,
    load_data_config,
    load_split,
)
from detect.data.data_config import check_sources, open_storage
from detect.data.dataset_plots import plot_label_stats
from detect.data.device_batch import multi_scale_sizes
from detect.data.images.ram_cache import NodeShare
from detect.data.labels.check import ImageBounds
from detect.data.loader import default_workers
from detect.data.storage.places import cache_home
from detect.errors import UserError
from detect.evaluation.evaluator import CocoEvaluator
from detect.inference.sample_images import sample_images
from detect.inference.slicing import SliceSettings
from detect.models import DetectionModel, ModelSpec, build_model, load_model_spec, model_max_stride
from detect.models.spec import with_anchors_per_level
from detect.models.weights import load_model, model_from_state, restore_model_state
from detect.models.yolo import check_class_count
from detect.ops.anchors import check_anchors, evolve_anchors, label_sizes
from detect.training.distributed import (
    DistContext,
    broadcast_object,
    gather_objects,
    host_cores,
    init_process_group,
    main_rank_answer,
    one_voice,
    patient_barrier,
)
from detect.training.epoch import Control, StepRecipe, TrainingParts, build_parts
from detect.training.optim import IterationPlan, ModelEMA, OptimSettings, build_scheduler, warmup_iterations
from detect.training.resume import Counters, ResumePoint, TrainingCheckpoint, restore_rng_state, resume_point
from detect.training.run import PhaseTimes, ResultsLog, Run, Validation
from detect.training.run_folder import RunFolder
from detect.training.settings import (
    AUTO_BATCH,
    NEW_RUN,
    Resume,
    TrainSettings,
    check_batch_size,
    check_model_given,
    fit_imgsz,
    tile_settings,
)

LOGGER = logging.getLogger(__name__)


def select_backend(settings: TrainSettings, context: DistContext) -> backends.Backend:
    """The device for this rank: under torchrun, the device at LOCAL_RANK in a --device list (0,1,2,3), else the
    accelerator whose index is LOCAL_RANK, whatever index --device names."""
    request = backends.parse_devices(settings.device)
    spec = settings.device
    if context.distributed and request.kind != "cpu":
        if len(request.indices) > 1:
            spec = request.spec(context.local_rank)
        else:
            kind = backends.parse_spec(request.spec())[0]
            kind = backends.select(kind, amp=False).name if kind == "auto" else kind
            spec = kind if kind == "cpu" else f"{kind}:{context.local_rank}"
    return backends.select(spec, amp=settings.amp, npu_jit_compile=settings.npu_jit_compile,
                           npu_allow_hf32=settings.npu_allow_hf32)


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """What a new run's model is made from, read and checked before anything is written: --cfg's architecture
    (else the weights'), and the --weights model whose fitting tensors it takes."""

    spec: ModelSpec
    weights: DetectionModel | None
    weights_name: str | None
    anchors_from_weights: bool  # no --cfg: the weights' anchors too (as yolov5)
    max_stride: int  # image sides are multiples of it

    @property
    def anchors_to_compute(self) -> bool:
        """--cfg says `anchors: N` (a number of anchors per level): AutoAnchor computes them from the labels."""
        return isinstance(self.spec.anchors, int) and not self.anchors_from_weights

    @classmethod
    def read(cls, settings: TrainSettings, hyp: Hyp) -> ModelSource:
        """Parse --cfg and load --weights (a bad one is a UserError naming it); check --freeze against the layers."""
        check_model_given(settings)
        weights = load_model(settings.weights) if settings.weights else None
        spec = with_anchors_per_level(load_model_spec(settings.cfg) if settings.cfg else weights.spec, hyp.anchors)
        layers = len(spec.layers)
        freeze = settings.freeze
        if len(freeze) == 1 and freeze[0] >= layers or len(freeze) > 1 and max(freeze) >= layers:
            raise UserError(f"--freeze {' '.join(map(str, freeze))}: the model has {layers} layers (0-{layers - 1}); "
                            f"freeze fewer, so that its Detect head (layer {layers - 1}) still trains")
        source = cls(spec, weights, settings.weights, settings.cfg is None and not hyp.anchors, model_max_stride(spec))
        if source.anchors_to_compute and settings.noautoanchor:
            raise UserError(f"--noautoanchor: {settings.hyp if hyp.anchors else settings.cfg} gives `anchors: "
                            f"{spec.anchors}` (a count), which AutoAnchor computes from the labels: drop --noautoanchor")
        return source

    def build(self, names: list[str]) -> DetectionModel:
        """A model for len(names) classes with every weights tensor whose name and shape fit."""
        model = build_model(self.spec, num_classes=len(names), names=list(names))
        if self.weights is None:
            return model
        target = model.state_dict()
        fitting = {name: tensor for name, tensor in self.weights.state_dict().items()
                   if name in target and tensor.shape == target[name].shape
                   and (self.anchors_from_weights or not name.endswith("anchors"))}
        model.load_state_dict(fitting, strict=False)
        LOGGER.info("transferred %d/%d tensors from %s", len(fitting), len(target), self.weights_name)
        return model


def freeze_layers(model: DetectionModel, freeze: tuple[int, ...]) -> int:
    """Stop gradients into layers: (n,) freezes layers 0..n-1, several numbers freeze those layers (yolov5's
    --freeze); returns how many parameters were frozen."""
    layers = range(freeze[0]) if len(freeze) == 1 else freeze
    prefixes = tuple(f"model.{layer}." for layer in layers)
    frozen = 0
    for name, parameter in model.named_parameters():
        parameter.requires_grad = not name.startswith(prefixes)
        frozen += not parameter.requires_grad
    if frozen:
        LOGGER.info("froze %d parameter tensors (layers %s)", frozen, list(layers))
    return frozen


def autoanchor(model: DetectionModel, records: list[ImageRecord], imgsz: int, anchor_threshold: float,
               seed: int, compute: bool = False) -> bool:
    """Replace the model's anchors in place when AutoAnchor finds better ones for these labels (always when
    `compute`: the model holds placeholders, ModelSource.anchors_to_compute); True if it did."""
    detect = model.detect
    strides = detect.stride.view(-1, 1, 1)
    image_wh = np.array([[record.width, record.height] for record in records], np.float64)
    boxes_wh = [record.train_boxes[1][:, 2:4] for record in records]
    rng = np.random.default_rng(seed)
    if compute:  # as yolov5, whose placeholders never pass the recall check: k-means + evolution straight away
        new = evolve_anchors(label_sizes(image_wh, boxes_wh, imgsz), detect.nl * detect.na, imgsz,
                             1 / anchor_threshold, rng)
        LOGGER.info("AutoAnchor: the model yaml or hyp asks for %d anchors per level: computed from the labels by "
                    "k-means and evolution", detect.na)
    else:
        anchors_px = (detect.anchors * strides).view(-1, 2).cpu().numpy()
        new = check_anchors(anchors_px, image_wh, boxes_wh, imgsz, anchor_threshold, rng)
    if new is None:
        return False
    new_anchors = torch.as_tensor(np.asarray(new), dtype=detect.anchors.dtype, device=detect.anchors.device)
    with torch.no_grad():
        detect.anchors.copy_(new_anchors.view_as(detect.anchors) / strides)
    return True


def _auto_batch(settings: TrainSettings, source: ModelSource, data: DataConfig,
                backend: backends.Backend) -> TrainSettings:
    """The settings with AutoBatch's batch size for this model, image size and device."""
    model = source.build(data.names).to(backend.device).train()
    batch_size = fit_batch_size(model, backend, settings.imgsz)
    del model
    backend.empty_cache()
    return dataclasses.replace(settings, batch_size=batch_size)


def loader_workers(settings: TrainSettings, context: DistContext, cores: list[int] | None = None) -> int:
    """As yolov5: no more loader workers per rank than its share of the cores (its --cpu-affinity cores when it is
    pinned), nor than its batch."""
    share = default_workers(context.world_size) if cores is None else min(8, len(cores))
    return min(settings.workers, share, settings.batch_size // context.world_size)


def _checked_split(settings: TrainSettings, data: DataConfig, split: str, context: DistContext) -> LabelledSplit:
    """This rank's check of `split`: each node's first rank checks it (writing the cache), then the others load it.
    A bucket's split on several nodes is checked once a job: by the main rank, whose label cache goes to the other
    nodes, so that a node fetches only the images its ranks read, not every image for the check."""
    data, storage = open_storage(data, settings.cache_dir)
    bounds = ImageBounds(settings.max_pixels, settings.max_boxes)
    check = functools.partial(load_split, data, split, settings.single_cls, settings.cache_dir, bounds, storage)
    found = None
    if storage.check_once_per_job and context.local_world_size < context.world_size:
        if context.is_main:
            found = check()
        patient_barrier(context, f"{split} labels/job")
        cache = found.cache_file if found is not None else None
        sent = broadcast_object(context, None if cache is None else (cache.name, cache.read_bytes()))
        if sent is not None and context.local_rank == 0 and not context.is_main:
            storage.keep_label_cache(*sent)
    for first in (True, False):  # each node's local rank 0, then the others
        if found is None and (context.local_rank == 0) == first:
            found = check()
        patient_barrier(context, f"{split} labels/{'first' if first else 'others'}")
    states = gather_objects(context, found.cache_state)
    if context.distributed and context.is_main:
        by_state = {state: [str(rank) for rank, other in enumerate(states) if other == state] for state in states}
        LOGGER.info("%s labels: cache %s", split, "; ".join(
            f"{state} on rank{'s' * (len(ranks) > 1)} {', '.join(ranks)}" for state, ranks in by_state.items()))
    return found


def _train_loader(settings: TrainSettings, data: DataConfig, hyp: Hyp, backend: backends.Backend,
                  context: DistContext, workers: int) -> Loader:
    """This rank's loader: the labels checked once a node (_checked_split), then every rank's image cache at once,
    the ranks of a node filling one --cache ram buffer together."""
    checked = _checked_split(settings, data, "train", context)
    share = NodeShare(context.local_rank, context.local_world_size, lambda name: patient_barrier(context, name),
                      f"{context.store.prefix.strip('/').replace('/', '-')}-train") if context.distributed else None
    loading = TrainLoaderSettings(AugmentSettings.from_hyp(hyp), settings.imgsz,
                                  settings.batch_size // context.world_size, workers, seed=settings.seed, rank=context.rank, world_size=context.world_size,
                                  cache=settings.cache, pin_memory=backend.device.type != "cpu", rect=settings.rect,
                                  cache_dir=settings.cache_dir, tiles=tile_settings(settings, data.tile))
    return build_train_loader(checked, loading, share=share)


def _model_and_ema(settings: TrainSettings, hyp: Hyp, loader: Loader, backend: backends.Backend,
                   context: DistContext, source: ModelSource | None,
                   point: ResumePoint | None) -> tuple[DetectionModel, ModelEMA | None]:
    """The model on the device (and its EMA on the main rank): a new run's from `source` with AutoAnchor's anchors, a
    resumed run's architecture from its checkpoint (its weights come back in _restore)."""
    model = source.build(loader.names) if point is None else model_from_state(point.checkpoint.model, str(point.path))
    freeze_layers(model, settings.freeze)
    model = model.to(backend.device)
    if backend.channels_last:
        model = model.to(memory_format=torch.channels_last)
    # The EMA is created before AutoAnchor and averages its way to the new anchors (docs/yolov5.md, "EMA").
    ema = ModelEMA(model) if context.is_main else None
    if point is None and context.is_main and not settings.noautoanchor:
        autoanchor(model, loader.records, settings.imgsz, hyp.anchor_t, settings.seed, source.anchors_to_compute)
    # The others wait here, not in a collective under --dist-timeout; DDP's first broadcast then gives them the anchors.
    patient_barrier(context, "AutoAnchor")
    if settings.sync_bn and not context.distributed:
        LOGGER.warning("--sync-bn does nothing in a single process (launch with torchrun)")
    return model, ema


def _restore(checkpoint: TrainingCheckpoint, model: DetectionModel, parts: TrainingParts,
             scheduler: torch.optim.lr_scheduler.LambdaLR, backend: backends.Backend) -> None:
    """Model, EMA, optimizer, scaler, scheduler and every RNG as the checkpoint left them."""
    restore_model_state(model, checkpoint.model)
    if parts.ema is not None:
        restore_model_state(parts.ema.module, checkpoint.ema)
        parts.ema.updates = checkpoint.ema_updates
    parts.optimizer.load_state_dict(checkpoint.optimizer)
    parts.scaler.load_state_dict(checkpoint.scaler)
    scheduler.load_state_dict(checkpoint.scheduler)
    restore_rng_state(checkpoint.rng, backend)


def _validation(settings: TrainSettings, data: DataConfig, model: DetectionModel, ema: ModelEMA | None,
                backend: backends.Backend, context: DistContext, workers: int) -> Validation:
    """This rank's val loader shard (twice the rank's batch, as yolov5; the labels checked once a node:
    _checked_split) and weights; the main rank's evaluator."""
    tiles, batch = tile_settings(settings, data.tile), 2 * (settings.batch_size // context.world_size)
    # a tiled run is scored by sliced inference over windows of its tile size, on the images and labels as they are
    slicing = tiles and SliceSettings(tiles.size, tiles.overlap, batch_size=batch, max_windows=tiles.max_windows)
    loading = ValLoaderSettings(settings.imgsz, batch, workers, model.max_stride,
                                pin_memory=backend.device.type != "cpu", rank=context.rank,
                                world_size=context.world_size, windows=tiles)
    loader = build_val_loader(_checked_split(settings, data, "val", context), loading)
    if ema is None:
        return Validation(loader, copy.deepcopy(model).eval().requires_grad_(False), None, slicing)
    return Validation(loader, ema.module, CocoEvaluator.for_split(loader.split), slicing)


def _resumed_backend(point: ResumePoint, joined: backends.Backend, context: DistContext) -> backends.Backend:
    """The backend of the run's stored settings (its device unless given again, its AMP), on the process group's
    kind of device."""
    backend = select_backend(point.settings, context)
    if context.distributed and backend.distributed_backend != joined.distributed_backend:
        raise UserError(f"--resume: the run was trained with --device {point.settings.device}; give the same "
                        f"--device again (the job's ranks joined on {joined.device.type})")
    return backend


def _amp_checked(backend: backends.Backend, model: DetectionModel, settings: TrainSettings,
                 context: DistContext) -> backends.Backend:
    """AMP as it is on by default (accelerators; the CPU where the model's step times clearly faster under autocast:
    amp_speed) stays on only if the model's predictions on a bundled image agree with fp32 (check_amp); each asked on
    the main rank for the job; else one line, and fp32. --amp and --no-amp are obeyed. Then one line says the
    precision and why."""
    why = ""
    if backend.amp_timed and settings.amp is None:
        amp = select_backend(dataclasses.replace(settings, amp=True), context)
        speed = main_rank_answer(context, "AMP timing", lambda: amp_speed(
            model, amp, settings.batch_size // context.world_size, settings.imgsz, cache_home(settings.cache_dir)))
        backend, why = (amp, f"{speed}; --no-amp for fp32") if speed.faster else (backend, f"{speed}; --amp forces it")
    if not backend.amp_enabled or settings.amp is not None:
        _log_precision(backend, settings, why)
        return backend
    model.eval()  # on every rank; the main rank's alone is run
    check = main_rank_answer(context, "AMP check", lambda: check_amp(
        model.predict, image_batch(sample_images()[0], settings.imgsz, backend.device), backend))
    model.train()
    if check.agrees:
        LOGGER.info("AMP check: autocast agrees with fp32 (%s)", check)
        _log_precision(backend, settings, why)
        return backend
    if context.is_main:  # the job's one verdict: one line, not one per rank
        LOGGER.warning("AMP check: autocast's predictions differ from fp32's (%s): training in fp32 (--amp forces "
                       "AMP)", check)
    fp32 = select_backend(dataclasses.replace(settings, amp=False), context)
    _log_precision(fp32, settings, f"the AMP check turned {backend.precision()} off; --amp forces it")
    return fp32


def _log_precision(backend: backends.Backend, settings: TrainSettings, why: str) -> None:
    """One line: the run's precision and why (`why`, else the flag or the backend's default), e.g. "precision: fp32
    (bf16 measured 0.46x fp32 on this CPU; --amp forces it)"."""
    if not why and settings.amp is not None:
        why = "--amp" if settings.amp else "--no-amp"
    elif not why:
        other = "--no-amp for fp32" if backend.amp_enabled else f"--amp for {backend.default_amp_dtype} autocast"
        why = f"{backend.amp_default_reason}; {other}"
    LOGGER.info("precision: %s (%s)", backend.precision(), why)


def build_run(settings: TrainSettings, context: DistContext, resume: Resume = NEW_RUN,
              resume_overrides: dict[str, Any] | None = None) -> Run:
    """Everything a run needs, in order; bad settings and yamls stop before the run folder (a new run's, where this
    rank can tell alone, before the process group)."""
    phases = PhaseTimes()
    source = None if resume.asked else ModelSource.read(settings, load_hyp(settings.hyp))
    if source is not None:
        settings = fit_imgsz(settings, source.max_stride)
        check_batch_size(settings, context)  # a bad flag must not leave ranks waiting
    backend = select_backend(settings, context)
    backend.set_device()
    context = init_process_group(context, backend.distributed_backend, settings.dist_timeout)
    point, context = resume_point(settings, context, resume, resume_overrides or {})
    one_voice(context)  # the rank that writes the run speaks, whatever its number
    if point is not None:
        settings = point.settings
        check_batch_size(settings, context)
        backend = _resumed_backend(point, backend, context)
        backend.set_device()
        LOGGER.info("resuming from %s: epoch %d, batch %d", point.path, point.checkpoint.counters.epoch + 1,
                    point.checkpoint.counters.batch)
    if settings.sync_bn and backend.device.type == "cpu":
        raise UserError("--sync-bn needs GPUs or NPUs: torch's SyncBatchNorm does not run on the CPU")
    data = load_data_config(settings.data)
    if source is not None:
        check_class_count(source.spec, len(data.names))  # before the label check
    check_sources(data, ("train", "val"))  # every rank validates its share
    if settings.batch_size == AUTO_BATCH:
        settings = _auto_batch(settings, source, data, backend)
    hyp = point.checkpoint.hyp if point else load_hyp(settings.hyp)
    backend.seed(settings.seed + context.rank)
    workers = loader_workers(settings, context, host_cores(settings.cpu_affinity, settings.device, backend, context))
    with phases.time("label check"):  # before the run folder
        train_loader = _train_loader(settings, data, hyp, backend, context, workers)
    folder = RunFolder.open(settings, context, resume=point is not None)
    counters = point.checkpoint.counters if point else Counters()
    train_loader.start(counters.epoch, counters.batch)  # the workers prepare the first batches while the model is built
    with phases.time("model and AutoAnchor"):
        model, ema = _model_and_ema(settings, hyp, train_loader, backend, context, source, point)
    backend = _amp_checked(backend, model, settings, context)
    optim_settings = OptimSettings.from_hyp(hyp, settings.optimizer, settings.cos_lr)
    recipe = StepRecipe(hyp, optim_settings, settings.batch_size, settings.imgsz, settings.label_smoothing,
                        settings.sync_bn)
    parts = build_parts(model, backend, recipe, context, ema)
    scheduler = build_scheduler(parts.optimizer, optim_settings, settings.epochs)
    if point:
        _restore(point.checkpoint, model, parts, scheduler, backend)
    sizes = multi_scale_sizes(settings.imgsz, model.max_stride) if settings.multi_scale else None
    plan = IterationPlan(optim_settings, settings.batch_size, warmup_iterations(optim_settings, len(train_loader)),
                         settings.epochs, sizes, settings.seed)
    with phases.time("label check"):
        validation = _validation(settings, data, model, ema, backend, context, workers)
    results = ResultsLog(folder.save_dir, first_epoch=counters.epoch) if context.is_main else None
    if context.is_main:
        folder.write_config(settings, hyp, data, context)
        if point is None and not settings.noplots:
            with phases.time("plots"):
                plot_label_stats(train_loader.records, train_loader.names, folder.save_dir / "labels.png")
    patient_barrier(context, "labels.png")  # the others wait here, not in the first step's collectives
    return Run(settings, hyp, folder, train_loader, model, parts, plan, scheduler,
               counters, Control(), validation, results, phases, dict(point.checkpoint.tracking) if point else {})
