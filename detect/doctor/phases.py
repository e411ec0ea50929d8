"""The ops each phase of training and validation runs on an Ascend NPU, recorded on the host: the NPU backend run dry
(detect/backend/npu_ops/dry_run.py: its own code paths, tensors on the CPU) under OpCheck, which sorts every op by
where the chosen torch_npu runs it; each op with the layers it came from (a module tracker follows forward and backward)."""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import functools
from collections.abc import Iterator
from typing import Self

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.module_tracker import ModuleTracker

from detect.backend import Backend
from detect.backend.npu_ops import NpuKernels, OpCheck, OpEvent, Verdict
from detect.backend.npu_ops.dry_run import dry_run_backend
from detect.config import load_hyp
from detect.data.batch import Batch, Sample, collate
from detect.data.device_batch import to_device_batch
from detect.inference.predictor import Predictor
from detect.inference.runtimes.torch_model import TorchInference
from detect.models import DetectionModel
from detect.training.control import Control
from detect.training.distributed import DistContext
from detect.training.optim import OPTIMIZERS, ModelEMA, OptimSettings, build_optimizer
from detect.training.step import (
    StepPhase,
    StepRecipe,
    backward,
    build_parts,
    forward_loss,
    in_job,
    optimizer_step,
    ranks_agree,
    to_device,
)

# Candidates the recorded NMS gets (an untrained model scores nothing above a real threshold): enough to fill a
# bucket of the NPU's padded NMS, few enough for the host's kernel.
NMS_CANDIDATES = 1000


@dataclasses.dataclass
class OpUse:
    """One op of a phase: where it runs, the composites it was called from, and the layers that called it."""

    op: str
    verdict: Verdict
    via: tuple[str, ...]
    count: int = 0
    layers: collections.Counter = dataclasses.field(default_factory=collections.Counter)


@dataclasses.dataclass
class PhaseOps:
    """The ops of one phase in the order first seen, by (op, the composites it was called from)."""

    name: str
    ops: dict[tuple[str, tuple[str, ...]], OpUse] = dataclasses.field(default_factory=dict)

    @property
    def uncovered(self) -> list[OpUse]:
        return [use for use in self.ops.values() if not use.verdict.covered]


class Recorder:
    """Sorts the ops run inside `phase(name)` blocks by phase, naming each op's layer ("model.24 (Detect)"); a context
    manager around all the phases."""

    def __init__(self, *roots: nn.Module, naming: bool = True, kernels: NpuKernels | None = None) -> None:
        self.naming = naming  # name each op's layer (False: every op is the phase's own)
        self.kernels = kernels  # the torch_npu release's lists to sort by (None: the newest)
        self.phases: list[PhaseOps] = []
        self.tracker = ModuleTracker()
        self.layers: dict[str, str] = {}
        self._current: PhaseOps | None = None
        self._calling: list[str] = []  # the layers whose forward is running, innermost last
        self._hooks: list = []
        for root in roots:
            self.add_root(root)

    def add_root(self, root: nn.Module) -> None:
        """Name the modules of `root` by the model's layer that holds them ("model.24 (Detect)"), else by the root's
        class ("DetectionLoss")."""
        if not self.naming:
            return
        for name, module in root.named_modules():
            parts = name.split(".")
            at = next((i for i in range(len(parts) - 1) if parts[i] == "model" and parts[i + 1].isdigit()), None)
            label = type(root).__name__
            if at is not None:
                label = f"model.{parts[at + 1]} ({type(root.get_submodule('.'.join(parts[:at + 2]))).__name__})"
                if at + 2 == len(parts):  # the layer itself: its calls are followed (predict() skips the root)
                    self._hooks += [module.register_forward_pre_hook(functools.partial(self._enter_layer, label)),
                                    module.register_forward_hook(self._leave_layer)]
            # ModuleTracker (for the backward) names a module by its root's class and path: "DetectionModel.model.2.m"
            self.layers[f"{type(root).__name__}.{name}".rstrip(".")] = label

    def _enter_layer(self, label: str, *_: object) -> None:
        self._calling.append(label)

    def _leave_layer(self, *_: object) -> None:
        self._calling.pop()

    def add(self, event: OpEvent) -> None:
        if self._current is None:
            return
        use = self._current.ops.setdefault((event.op, event.via), OpUse(event.op, event.verdict, event.via))
        use.count += 1
        known = [name for name in self.tracker.parents if name in self.layers]
        label = self._calling[-1] if self._calling else self.layers[max(known, key=len)] if known else None
        use.layers[label or self._current.name] += 1

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._current = PhaseOps(name)
        self.phases.append(self._current)
        try:
            with OpCheck(self.add, fallback="run", kernels=self.kernels):
                yield
        finally:
            self._current = None

    def __enter__(self) -> Self:
        # One tracker for the whole recording: it names a backward's layers from hooks its forward left.
        if self.naming:
            self.tracker.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.naming:
            self.tracker.__exit__(*exc_info)
        for hook in self._hooks:
            hook.remove()


def synthetic_batch(batch_size: int, imgsz: int, num_classes: int, seed: int) -> Batch:
    """A seeded batch of grey-and-noise images with three boxes each (what the ops see; the values do not matter)."""
    rng = np.random.default_rng(seed)
    samples = []
    for index in range(batch_size):
        image = rng.integers(0, 256, size=(3, imgsz, imgsz), dtype=np.uint8)
        centres, sizes = rng.uniform(0.3, 0.7, size=(3, 2)), rng.uniform(0.1, 0.4, size=(3, 2))
        labels = np.concatenate([rng.integers(num_classes, size=(3, 1)), centres, sizes], axis=1)
        samples.append(Sample(image=image, labels=labels.astype(np.float32), path=f"synthetic/{index}",
                              image_id=index))
    return collate(samples)


def nms_threshold(output: torch.Tensor, candidates: int = NMS_CANDIDATES) -> float:
    """A score threshold that lets about `candidates` (box, class) pairs of a decoded output into NMS."""
    scores = (output[..., 4:5] * output[..., 5:]).flatten()
    return float(scores.topk(min(candidates, scores.numel())).values[-1]) * (1 - 1e-6)


def record_training(recorder: Recorder, model: DetectionModel, ema: ModelEMA, backend: Backend, imgsz: int,
                    batch_size: int, optimizers: tuple[str, ...]) -> None:
    """The training step's own phases (training/step.py), in its order, with the first of `optimizers`: the copy and
    resize, forward, loss, backward and each phase of the optimizer step; then the step phase of each other
    optimizer, on the gradients of one more forward and backward (not recorded)."""
    hyp = load_hyp()
    recipe = StepRecipe(hyp, OptimSettings.from_hyp(hyp, optimizer=optimizers[0]), batch_size, imgsz)
    parts = build_parts(model, backend, recipe, ema)
    recorder.add_root(parts.criterion)
    batch = to_device(parts, synthetic_batch(batch_size, imgsz, model.nc, seed=0), imgsz + model.max_stride,
                      recorder.phase)
    backward(parts, forward_loss(parts, batch, recorder.phase)[0], recorder.phase)
    optimizer_step(parts, recorder.phase)
    for name in optimizers[1:]:
        optimizer = build_optimizer(model, OptimSettings.from_hyp(hyp, optimizer=name), batch_size)
        other = dataclasses.replace(parts, optimizer=optimizer)
        backward(other, forward_loss(other, batch)[0])
        optimizer_step(other, _its_step_only(recorder, name))


def _its_step_only(recorder: Recorder, optimizer: str) -> StepPhase:
    """The optimizer's own step phase recorded, the step's other phases (recorded already) run unrecorded."""
    title = f"{optimizer} step"
    return lambda phase: recorder.phase(phase) if phase.startswith(title) else contextlib.nullcontext()


def record_validation(recorder: Recorder, ema: ModelEMA, backend: Backend, imgsz: int, batch_size: int) -> None:
    """Validation's phases: the fused EMA model's forward with its decode, then NMS as the NPU backend runs it."""
    inference = TorchInference(copy.deepcopy(ema.module), backend)
    recorder.add_root(inference.model)
    batch = synthetic_batch(batch_size, imgsz, ema.module.nc, seed=1)
    with recorder.phase("validation forward and decode"):
        output = inference(to_device_batch(batch, backend).images)
    threshold = nms_threshold(output)
    with recorder.phase("NMS"):
        Predictor(inference).detections(output, backend, conf_threshold=threshold, iou_threshold=0.6, max_det=300)


def record_ddp(recorder: Recorder, model: DetectionModel, backend: Backend, imgsz: int, batch_size: int) -> None:
    """The step's all-reduce of its flags and DDP's gradient hooks in its backward (bucket copies and the all-reduce),
    in a process group of one gloo rank made for it (none exists in the doctor)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        hyp = load_hyp()
        recipe = StepRecipe(hyp, OptimSettings.from_hyp(hyp), batch_size, imgsz)
        parts = in_job(build_parts(model, backend, recipe), DistContext(world_size=2))
        recorder.add_root(parts.train_model)
        loss, _ = forward_loss(parts, to_device(parts, synthetic_batch(batch_size, imgsz, model.nc, seed=2)))
        ranks_agree(parts, loss, Control(), recorder.phase)
        backward(parts, loss, lambda phase: recorder.phase("DDP backward (gradient buckets, all-reduce)"))
    finally:
        dist.destroy_process_group()


def record_phases(model: DetectionModel, imgsz: int | None = None, batch_size: int = 2,
                  optimizers: tuple[str, ...] = OPTIMIZERS, validation: bool = True, ddp: bool = True,
                  layers: bool = True, kernels: NpuKernels | None = None) -> list[PhaseOps]:
    """Every phase's ops for `model` (trained in place a step; give a copy to keep it) at `imgsz` (default: twice its
    largest stride), in fp16 autocast with torch_npu's GradScaler, as training on a 910B runs: the step as it runs
    with the first of `optimizers`, and the step phase of each other one; `layers`: name the layers each op came from
    (hooks on every layer and tensor: the recording's slowest part); `kernels`: the lists of the torch_npu release to
    sort by (default: the newest)."""
    imgsz = imgsz or 2 * model.max_stride
    backend = dry_run_backend()
    model = model.float().train()
    ema = ModelEMA(model)  # copied before the recorder hooks the model's layers
    with Recorder(model, naming=layers, kernels=kernels) as recorder:
        record_training(recorder, model, ema, backend, imgsz, batch_size, optimizers)
        if validation:
            record_validation(recorder, ema, backend, imgsz, batch_size)
        if ddp and not dist.is_initialized():
            record_ddp(recorder, model, backend, imgsz, batch_size)
    return recorder.phases
