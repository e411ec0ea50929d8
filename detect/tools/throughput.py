"""Model-only throughput on one fixed batch already on the device: the trainer's own training step (training/step.py:
forward and loss, scaled backward, the optimizer step every `accumulate` batches) and inference (fused, eval mode)."""

from __future__ import annotations

import copy
import dataclasses
import time

import torch

from detect import backend as backends
from detect.config import load_hyp
from detect.data.batch import Batch
from detect.data.device_batch import to_device_batch
from detect.inference.runtimes.torch_model import TorchInference
from detect.models import DetectionModel
from detect.tools.workload import precision_name
from detect.training.optim import ModelEMA, OptimSettings, accumulate_steps
from detect.training.step import StepRecipe, TrainingParts, backward, build_parts, forward_loss, optimizer_step


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One timed phase: images per second and the device's peak memory (the process's peak RSS on the CPU)."""

    mode: str  # train | inference
    precision: str  # fp32 | fp16 | bf16
    amp: bool
    img_per_s: float
    peak_memory_bytes: int


def _prepared(model: DetectionModel, backend: backends.Backend) -> DetectionModel:
    model = copy.deepcopy(model).to(backend.device)
    return model.to(memory_format=torch.channels_last) if backend.channels_last else model


def _parts(model: DetectionModel, backend: backends.Backend, imgsz: int, batch_size: int) -> TrainingParts:
    """The trainer's step parts for one process with yolov5's default hyp, past warmup."""
    hyp = load_hyp()
    return build_parts(model, backend, StepRecipe(hyp, OptimSettings.from_hyp(hyp), batch_size, imgsz), ModelEMA(model))


def _timed(backend: backends.Backend, run, warmup: int, steps: int, batch_size: int) -> tuple[float, int]:
    """(images per second over `steps` calls of run(step) after `warmup` untimed ones, peak memory bytes)."""
    backend.empty_cache()
    backend.reset_peak_memory()
    for step in range(warmup):
        run(step)
    backend.synchronize()
    started = time.perf_counter()
    for step in range(warmup, warmup + steps):
        run(step)
    backend.synchronize()
    return steps * batch_size / (time.perf_counter() - started), backend.memory_stats().peak_bytes


def measure_train(model: DetectionModel, batch: Batch, backend: backends.Backend, imgsz: int, warmup: int,
                  steps: int) -> Measurement:
    """Training steps on the batch: model only, the data loader excluded."""
    parts = _parts(_prepared(model, backend).train(), backend, imgsz, len(batch))
    device_batch = to_device_batch(batch, backend)
    accumulate = accumulate_steps(len(batch))

    def step(index: int) -> None:
        backward(parts, forward_loss(parts, device_batch)[0])
        # nominal batch 64, as in training (docs/yolov5.md, "Optimizer and weight decay")
        if (index + 1) % accumulate == 0:
            optimizer_step(parts)

    rate, peak = _timed(backend, step, warmup, steps, len(batch))
    return Measurement("train", precision_name(backend), backend.amp_enabled, rate, peak)


def measure_inference(model: DetectionModel, batch: Batch, backend: backends.Backend, warmup: int,
                      steps: int) -> Measurement:
    """Predictions through validation's own inference path (fused, decoded; NMS excluded), under the backend's
    autocast as validation during training runs it."""
    inference = TorchInference(copy.deepcopy(model), backend)  # it fuses the model it is given
    images = to_device_batch(batch, backend).images

    def step(index: int) -> None:
        with backend.autocast():
            inference(images)

    rate, peak = _timed(backend, step, warmup, steps, len(batch))
    return Measurement("inference", precision_name(backend), backend.amp_enabled, rate, peak)
