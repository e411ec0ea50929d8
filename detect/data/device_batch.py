"""Device side of a batch: uint8 -> float [0, 1] on the accelerator, optional multi-scale resize, targets along."""

from __future__ import annotations

import dataclasses
from typing import Protocol

import torch

from detect.data.batch import Batch

# A few fixed scales of imgsz (yolov5 draws from [0.5, 1.5] x imgsz: docs/yolov5.md, "Multi-scale"); few sizes keep the
# number of compiled NPU graphs small (docs/architecture.md, "Static shapes").
MULTI_SCALES = (0.5, 0.75, 1.0, 1.25, 1.5)


class ResizeBackend(Protocol):
    """What this module needs from detect.backend: the device, its memory format, a host->device copy, a batched
    resize."""

    device: torch.device
    channels_last: bool

    def to_device(self, tensor: torch.Tensor, non_blocking: bool = True) -> torch.Tensor: ...

    def resize(self, images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor: ...


@dataclasses.dataclass
class DeviceBatch:
    """images (B, 3, h, w) float32 in [0, 1] on the device; targets as in Batch (normalised) on the device."""

    images: torch.Tensor
    targets: torch.Tensor
    padded_targets: torch.Tensor
    target_counts: torch.Tensor
    size: tuple[int, int]


def multi_scale_sizes(imgsz: int, stride: int = 32, scales: tuple[float, ...] = MULTI_SCALES) -> tuple[int, ...]:
    """The fixed set of training sizes: each scale of imgsz rounded to a multiple of stride (at least stride)."""
    return tuple(sorted({max(stride, round(imgsz * scale / stride) * stride) for scale in scales}))


def pick_size(sizes: tuple[int, ...], seed: int, step: int) -> int:
    """The size for a step, a function of (seed, step) alone so every rank and a resumed run agree."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return sizes[int(torch.randint(len(sizes), (1,), generator=generator))]


def to_device_batch(batch: Batch, backend: ResizeBackend, size: int | tuple[int, int] | None = None) -> DeviceBatch:
    """Copy (uint8, so 4x fewer bytes), convert to float [0, 1], resize the whole batch if `size` differs, in the
    backend's memory format (channels-last on the CPU, which the host batch already is: no copy there).

    Targets are normalised to the image, so resizing the image leaves them unchanged; only their device moves.
    """
    images = backend.to_device(batch.images, non_blocking=True).float() / 255
    if size is not None:
        target = (size, size) if isinstance(size, int) else tuple(size)
        if tuple(images.shape[2:]) != target:
            images = backend.resize(images, target)
    images = images.contiguous(memory_format=torch.channels_last if backend.channels_last else torch.contiguous_format)
    return DeviceBatch(
        images=images,
        targets=backend.to_device(batch.targets, non_blocking=True),
        padded_targets=backend.to_device(batch.padded_targets, non_blocking=True),
        target_counts=backend.to_device(batch.target_counts, non_blocking=True),
        size=tuple(images.shape[2:]),
    )
