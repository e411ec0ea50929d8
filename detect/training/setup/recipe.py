"""A training run's settings read once: checked against each other, the job, the device, and what the files they name
hold (sources.py reads them), and resolved into one frozen RunRecipe, from which build.py builds the run without
reading a setting. Every check between settings that needs more than the flags themselves is here, each a one-line
UserError made before anything is written: the batch over the ranks and the hyp before the process group (every rank
can tell alone), the others once the job is joined and a resumed run's stored settings are known. (A pair of flags
alone, --rect with --multi-scale, is refused as TrainSettings is made.)"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from pathlib import Path
from typing import Any

from detect import backend as backends
from detect.backend.autobatch import fit_batch_size
from detect.config import Hyp, load_hyp
from detect.data import AugmentSettings, DataConfig, TrainLoaderSettings, ValLoaderSettings
from detect.data.labels.check import ImageBounds
from detect.data.loader import default_workers
from detect.data.tiles.windows import TileSettings
from detect.errors import UserError
from detect.inference.slicing import SliceSettings
from detect.models.stored import TrainedWith
from detect.models.transfer import AnchorFit, ModelSource
from detect.training.distill import MODES, Distillation, Teacher
from detect.training.distributed import DistContext, host_cores, init_process_group, one_voice
from detect.training.optim import OptimSettings
from detect.training.resume import ResumePoint, resume_point
from detect.training.run_folder import RunPlace
from detect.training.settings import AUTO_BATCH, NEW_RUN, Resume, TrainSettings
from detect.training.setup.sources import SourceFiles, Sources, read_sources
from detect.training.step import StepRecipe

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PrecisionRequest:
    """What the run asks of this rank's backend: its device (the spec at the rank's place in the job), --amp or
    --no-amp (None: the device's default, which the AMP check then tries on the model) and the NPU's options."""

    device: str
    amp: bool | None = None
    npu_jit_compile: bool | None = None
    npu_allow_hf32: bool | None = None
    nms_device: str = "device"  # where validation's NMS runs: the device or the host (--nms-device)

    def backend(self) -> backends.Backend:
        """The backend this request selects."""
        return backends.select(self.device, amp=self.amp, npu_jit_compile=self.npu_jit_compile,
                               npu_allow_hf32=self.npu_allow_hf32, nms_device=self.nms_device)


@dataclasses.dataclass(frozen=True)
class SplitCheck:
    """What the label check of a split takes besides the data yaml: --single-cls, the cache folder, each image's
    bounds."""

    single_cls: bool
    cache_dir: str | None
    bounds: ImageBounds


@dataclasses.dataclass(frozen=True)
class LoopRecipe:
    """What the epoch loop, the evaluations and the hooks follow once the run is built."""

    epochs: int
    trained: TrainedWith  # the image size and data yaml the weights record and the run's last lines name
    rank_batch: int  # this rank's share of the global batch
    validate_each_epoch: bool  # else the last epoch alone (--noval)
    save_each_epoch: bool  # else last.pt at the last epoch alone (--nosave)
    save_period: int  # epoch<N>.pt every N epochs (0 or less: none)
    save_minutes: float  # last.pt inside an epoch every M minutes (0: none)
    patience: int  # epochs without a better fitness before the run ends (0: never)
    plots: bool
    progress: bool
    collective_timeout: float  # seconds a collective may wait (--dist-timeout)


@dataclasses.dataclass(frozen=True)
class RunRecipe:
    """A run as this rank builds it: what it joined and read, then every value of its set-up, resolved."""

    settings: TrainSettings  # the run's own (imgsz fitted, AutoBatch's batch, a resumed run's), as checkpoints and
    #                          config.yaml keep them
    hyp: Hyp
    context: DistContext  # this rank in the job it joined
    backend: backends.Backend  # this rank's device, before the AMP check
    point: ResumePoint | None  # the checkpoint a resumed run continues (None: a new run)
    source: ModelSource | None  # what a new run's model is made from
    data: DataConfig
    teacher: Teacher | None  # --teacher, checked against the student (a new run) or last.pt's hash (a resumed run)
    precision: PrecisionRequest
    split_check: SplitCheck
    train_loading: TrainLoaderSettings
    val_loading: ValLoaderSettings  # the model's stride is set when it is built
    slicing: SliceSettings | None  # a tiled run is scored by sliced inference over windows of its tile size
    freeze: tuple[int, ...]
    anchors: AnchorFit | None  # None: no AutoAnchor (--noautoanchor, a resumed run)
    step: StepRecipe
    sync_bn: bool
    multi_scale: bool
    loop: LoopRecipe
    seed: int
    folder: RunPlace
    label_plots: bool  # labels.png: a new run's, unless --noplots

    @property
    def imgsz(self) -> int:
        """The training image side, fitted to the model's largest stride (the one the weights record)."""
        return self.loop.trained.imgsz


def resolve_run(settings: TrainSettings, context: DistContext, resume: Resume = NEW_RUN,
                overrides: dict[str, Any] | None = None) -> RunRecipe:
    """This rank's recipe, in order: a new run's batch and hyp checked (before the process group: every rank can tell
    alone), this rank's device and the job's process group, where the run resumes from (a resumed run's stored
    settings and device, `overrides` replacing some), what the files hold (the data yaml, a new run's model built for
    its classes, the teacher), the model and the teacher checked against the settings and each other, AutoBatch's
    batch, this rank's host cores; then every value the set-up builds from."""
    hyp = None
    if not resume.asked:
        check_batch_size(settings, context)  # a bad flag must not leave ranks waiting
        hyp = _new_hyp(settings)
    settings, context, backend, point = _join(settings, context, resume, overrides or {})
    hyp = hyp or point.checkpoint.hyp
    backend.seed(settings.seed + context.rank)  # a new run's first weights; build_run seeds what follows again
    sources = read_sources(SourceFiles(settings.data, settings.cfg, settings.weights, hyp.anchors, settings.teacher,
                                       settings.single_cls, new_run=point is None))
    if point is None:
        settings = _checked_new_model(settings, hyp, sources.student)
    _check_teacher(settings, sources, point)
    if settings.batch_size == AUTO_BATCH:  # measured with a copy of the new run's model on this device (one device)
        model = copy.deepcopy(sources.student.model).to(backend.device).train()
        settings = dataclasses.replace(settings, batch_size=fit_batch_size(model, backend, settings.imgsz))
        del model
        backend.empty_cache()
    cores = host_cores(settings.cpu_affinity, settings.device, backend, context)
    joined = _Joined(settings, hyp, context, backend, point, sources.student, sources.data, sources.teacher)
    return _resolved(joined, cores)


def _new_hyp(settings: TrainSettings) -> Hyp:
    """A new run's hyp, once a model is given."""
    if settings.cfg is None and settings.weights is None:
        raise UserError("give a model: --cfg yolov5s.yaml (from scratch) and/or --weights FILE (fine-tune)")
    return load_hyp(settings.hyp)


def _checked_new_model(settings: TrainSettings, hyp: Hyp, source: ModelSource) -> TrainSettings:
    """A new run's settings checked against its model: --freeze within its layers, AutoAnchor on for anchors it must
    compute; --imgsz fitted to its largest stride (yolov5's rule for training: a multiple of it, at least twice it)."""
    layers = len(source.spec.layers)
    if max(settings.freeze) >= layers:
        raise UserError(f"--freeze {' '.join(map(str, settings.freeze))}: the model has {layers} layers (0-"
                        f"{layers - 1}); freeze fewer, so that its Detect head (layer {layers - 1}) still trains")
    if source.anchors_to_compute and settings.noautoanchor:
        raise UserError(f"--noautoanchor: {settings.hyp if hyp.anchors else settings.cfg} gives `anchors: "
                        f"{source.spec.anchors}` (a count), which AutoAnchor computes from the labels: drop "
                        "--noautoanchor")
    stride = source.model.max_stride
    imgsz = max(math.ceil(settings.imgsz / stride) * stride, 2 * stride)
    if imgsz != settings.imgsz:
        LOGGER.warning("--imgsz %d: the model needs a multiple of its largest stride %d, at least %d: training at %d",
                       settings.imgsz, stride, 2 * stride, imgsz)
    return dataclasses.replace(settings, imgsz=imgsz)


def _join(settings: TrainSettings, context: DistContext, resume: Resume,
          overrides: dict[str, Any]) -> tuple[TrainSettings, DistContext, backends.Backend, ResumePoint | None]:
    """This rank's device and the job's process group, then where the run resumes from, the same on every rank: a
    resumed run's stored settings (the batch checked over this job's ranks) and device, which must be of the kind the
    job joined on; --sync-bn checked against the device and the job."""
    backend = precision_request(settings, context).backend()
    backend.set_device()
    context = init_process_group(context, backend.distributed_backend, settings.dist_timeout)
    project = Path(settings.project)  # where a bare --resume looks for the newest run
    point, context = resume_point(project, context, resume, overrides)
    one_voice(context)  # the rank that writes the run speaks, whatever its number
    if point is not None:
        settings, joined = point.settings, backend
        check_batch_size(settings, context)
        backend = precision_request(settings, context).backend()
        if context.distributed and backend.distributed_backend != joined.distributed_backend:
            raise UserError(f"--resume: the run was trained with --device {settings.device}; give the same --device "
                            f"again (the job's ranks joined on {joined.device.type})")
        backend.set_device()
        LOGGER.info("resuming from %s: epoch %d, batch %d", point.path, point.checkpoint.counters.epoch + 1,
                    point.checkpoint.counters.batch)
    if settings.sync_bn and backend.device.type == "cpu":
        raise UserError("--sync-bn needs GPUs or NPUs: torch's SyncBatchNorm does not run on the CPU")
    if settings.sync_bn and not context.distributed:
        LOGGER.warning("--sync-bn does nothing in a single process (launch with torchrun)")
    return settings, context, backend, point


@dataclasses.dataclass(frozen=True)
class _Joined:
    """What a run joined and read before its recipe is resolved (RunRecipe's first fields)."""

    settings: TrainSettings
    hyp: Hyp
    context: DistContext
    backend: backends.Backend
    point: ResumePoint | None
    source: ModelSource | None
    data: DataConfig
    teacher: Teacher | None


def _check_teacher(settings: TrainSettings, sources: Sources, point: ResumePoint | None) -> None:
    """--teacher checked: a new run's against its student and the data's classes (--single-cls: one), a resumed
    run's against the hash its last.pt keeps."""
    if sources.teacher is None:
        return
    if point is not None:
        sources.teacher.check_unchanged(point.checkpoint.distill, point.path)
    else:
        sources.teacher.check_fits(sources.student.spec, sources.names, settings.distill or MODES[0])


def _distillation(settings: TrainSettings, hyp: Hyp, teacher: Teacher | None) -> Distillation | None:
    """The step's distillation: the teacher's term (--distill, default feature), its gain (--distill-weight, else the
    hyp's distill) and the first epoch without it (the hyp's distill_off, a share of the run's last epochs)."""
    if teacher is None:
        return None
    gain = hyp.distill if settings.distill_weight is None else settings.distill_weight
    return Distillation(teacher, settings.distill or MODES[0], gain,
                        settings.epochs - round(hyp.distill_off * settings.epochs))


def _resolved(joined: _Joined, cores: list[int] | None) -> RunRecipe:
    """The recipe's values, from the run's settings, hyp, job and data; loader workers per rank as yolov5: no more
    than the rank's share of the cores (its --cpu-affinity cores when pinned), nor than its batch."""
    settings, context, hyp = joined.settings, joined.context, joined.hyp
    rank_batch = settings.batch_size // context.world_size
    loop = _loop(settings, rank_batch)
    share = default_workers(context.world_size) if cores is None else min(8, len(cores))
    workers = min(settings.workers, share, rank_batch)
    tiles = tile_settings(settings, joined.data.tile)
    pinned = joined.backend.device.type != "cpu"
    train_loading = TrainLoaderSettings(AugmentSettings.from_hyp(hyp), settings.imgsz, rank_batch, workers,
                                        seed=settings.seed, rank=context.rank, world_size=context.world_size,
                                        cache=settings.cache, pin_memory=pinned, rect=settings.rect,
                                        cache_dir=settings.cache_dir, tiles=tiles)
    val_batch = 2 * rank_batch  # as yolov5
    val_loading = ValLoaderSettings(settings.imgsz, val_batch, workers, pin_memory=pinned, rank=context.rank,
                                    world_size=context.world_size, windows=tiles)
    slicing = tiles and SliceSettings(tiles.size, tiles.overlap, batch_size=val_batch, max_windows=tiles.max_windows)
    precision = precision_request(settings, context)
    distill = _distillation(settings, hyp, joined.teacher)
    optim = OptimSettings.from_hyp(hyp, settings.optimizer, settings.cos_lr)
    anchors = None if joined.point is not None or settings.noautoanchor else AnchorFit(
        settings.imgsz, hyp.anchor_t, settings.seed, joined.source.anchors_to_compute)
    return RunRecipe(
        **vars(joined), precision=precision,
        split_check=SplitCheck(settings.single_cls, settings.cache_dir, ImageBounds(settings.max_pixels,
                                                                                   settings.max_boxes)),
        train_loading=train_loading, val_loading=val_loading, slicing=slicing, freeze=settings.freeze, anchors=anchors,
        step=StepRecipe(hyp, optim, settings.batch_size, settings.imgsz, settings.label_smoothing, distill),
        sync_bn=settings.sync_bn, multi_scale=settings.multi_scale, loop=loop, seed=settings.seed,
        folder=RunPlace(settings.project, settings.name, settings.exist_ok or joined.point is not None),
        label_plots=joined.point is None and not settings.noplots)


def _loop(settings: TrainSettings, rank_batch: int) -> LoopRecipe:
    """What the loop follows, from the run's settings."""
    return LoopRecipe(settings.epochs, TrainedWith(settings.imgsz, settings.data), rank_batch, not settings.noval,
                      not settings.nosave, settings.save_period, settings.save_minutes, settings.patience,
                      not settings.noplots, settings.progress, settings.dist_timeout)


def precision_request(settings: TrainSettings, context: DistContext) -> PrecisionRequest:
    """The backend's request for this rank: under torchrun the device at LOCAL_RANK in a --device list (0,1,2,3),
    else the accelerator whose index is LOCAL_RANK, whatever index --device names."""
    request = backends.parse_devices(settings.device)
    device = settings.device
    if context.distributed and request.kind != "cpu":
        if len(request.indices) > 1:
            device = request.spec(context.local_rank)
        else:
            kind = backends.parse_spec(request.spec())[0]
            kind = backends.select(kind, amp=False).name if kind == "auto" else kind
            device = kind if kind == "cpu" else f"{kind}:{context.local_rank}"
    return PrecisionRequest(device, settings.amp, settings.npu_jit_compile, settings.npu_allow_hf32,
                            settings.nms_device)


def tile_settings(settings: TrainSettings, from_yaml: TileSettings | None) -> TileSettings | None:
    """The windows a run trains on: the data yaml's tile: with --tile, --tile-overlap and --max-windows over it; None:
    whole images (no tile: and no --tile, or --tile 0)."""
    if settings.tile == 0 or settings.tile is None and from_yaml is None:
        return None
    base = from_yaml or TileSettings(size=settings.tile)
    overlap = base.overlap if settings.tile_overlap is None else settings.tile_overlap
    return dataclasses.replace(base, size=settings.tile or base.size, overlap=overlap,
                               max_windows=settings.max_windows)


def check_batch_size(settings: TrainSettings, context: DistContext) -> None:
    """The global batch must divide over the ranks; AutoBatch measures one device."""
    if settings.batch_size == AUTO_BATCH and context.distributed:
        raise UserError("--batch-size -1 (AutoBatch) measures one device: give the total batch size for "
                        f"{context.world_size} ranks")
    if settings.batch_size % context.world_size:
        raise UserError(f"--batch-size {settings.batch_size} does not divide over {context.world_size} ranks")
