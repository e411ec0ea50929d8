"""AutoBatch (`--batch-size -1`): the largest batch whose training step fits a fraction of the device's free memory,
from the peak memory of a few measured batch sizes (yolov5's utils/autobatch.py method; our code)."""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn

from detect.backend.base import Backend

LOGGER = logging.getLogger(__name__)

DEFAULT_BATCH = 16  # yolov5's default, and what the CPU gets
TARGET_FRACTION = 0.6  # of the free device memory, as yolov5 aims
PROBE_BATCHES = (1, 2, 4, 8, 16)
LARGEST_BATCH = 1024  # a fit beyond this (or below 1) is an anomaly: the default is used
GIB = 2**30


def _step_peak(model: nn.Module, backend: Backend, batch: int, imgsz: int) -> int | None:
    """Peak device bytes of one forward and backward pass at `batch` images, or None when it ran out of memory."""
    backend.empty_cache()
    backend.reset_peak_memory()
    try:
        images = torch.zeros(batch, 3, imgsz, imgsz, device=backend.device)
        with backend.autocast():
            outputs = model(images)
        sum(output.float().sum() for output in outputs).backward()
        backend.synchronize()
        return backend.memory_stats().peak_bytes
    except RuntimeError as error:  # torch.OutOfMemoryError on CUDA; torch_npu raises RuntimeError("NPU out of memory")
        if "out of memory" not in str(error).lower():
            raise
        return None
    finally:
        model.zero_grad(set_to_none=True)


def fit_batch_size(model: nn.Module, backend: Backend, imgsz: int, fraction: float = TARGET_FRACTION) -> int:
    """The batch size whose step uses `fraction` of the free memory of backend's device (model on it, train mode);
    on the CPU one line and DEFAULT_BATCH, as yolov5 does."""
    if backend.name == "cpu":
        LOGGER.info("AutoBatch: --batch-size -1 measures accelerator memory; on the CPU the default batch size %d",
                    DEFAULT_BATCH)
        return DEFAULT_BATCH
    free, total = backend.memory_info()
    peaks = [_step_peak(model, backend, batch, imgsz) for batch in PROBE_BATCHES]
    measured = [(batch, peak) for batch, peak in zip(PROBE_BATCHES, peaks) if peak is not None]
    if len(measured) < 2:
        LOGGER.warning("AutoBatch: fewer than two batch sizes fit in memory; using batch size %d", DEFAULT_BATCH)
        return DEFAULT_BATCH
    slope, intercept = np.polyfit(*zip(*measured), deg=1)
    batch = int((free * fraction - intercept) / slope) if slope > 0 else LARGEST_BATCH + 1
    first_failure = next((size for size, peak in zip(PROBE_BATCHES, peaks) if peak is None), None)
    if first_failure is not None and batch >= first_failure:
        batch = measured[-1][0]  # the fit says more than what failed: the largest size that ran
    if not 1 <= batch <= LARGEST_BATCH:
        LOGGER.warning("AutoBatch: the fit gave batch size %d, outside 1-%d; using %d", batch, LARGEST_BATCH,
                       DEFAULT_BATCH)
        return DEFAULT_BATCH
    used = np.polyval((slope, intercept), batch)
    LOGGER.info("AutoBatch: batch size %d for %s at %d px: %.2f GiB of %.2f GiB free (%.0f%%; target %.0f%%), "
                "%.2f GiB total", batch, backend.device, imgsz, used / GIB, free / GIB, 100 * used / free,
                100 * fraction, total / GIB)
    return batch
