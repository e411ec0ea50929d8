"""One sample, one batch (the type training and evaluation receive), and the collate that builds fixed-shape targets."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import torch

from detect.data.images.letterbox import LetterboxInfo

# Padded targets hold a multiple of this many rows per image, so their shape stays fixed for nearly every batch
# (docs/architecture.md, "Static shapes"); a batch with more targets grows to the next multiple instead of dropping any.
TARGET_BUCKET = 128


@dataclasses.dataclass
class Sample:
    """One network input: (3, H, W) uint8 RGB, (n, 5) labels [cls, cx, cy, w, h] normalised to this input.

    problems holds one line "<path>: <reason>" per file that failed while this sample was built; a sample that
    stands in for an unreadable image (a grey placeholder, validation only) has usable False.
    """

    image: np.ndarray
    labels: np.ndarray
    path: str
    image_id: int
    letterbox: LetterboxInfo | None = None
    problems: tuple[str, ...] = ()
    usable: bool = True


@dataclasses.dataclass
class Batch:
    """images (B, 3, H, W) uint8 RGB, channels-last in memory (stack_images); targets (T, 6) [batch_index, cls,
    cx, cy, w, h] normalised; padded_targets (B, M, 5) [cls, cx, cy, w, h] with cls -1 on padding rows;
    target_counts (B,) int64; problems: the samples' problem lines in order; unusable_ids: image ids of
    placeholders, not to be scored."""

    images: torch.Tensor
    targets: torch.Tensor
    padded_targets: torch.Tensor
    target_counts: torch.Tensor
    paths: tuple[str, ...]
    image_ids: tuple[int, ...]
    letterbox: tuple[LetterboxInfo | None, ...]
    problems: tuple[str, ...]
    unusable_ids: tuple[int, ...]

    def pin_memory(self) -> Batch:
        """The same batch in pinned host memory (DataLoader calls this when pin_memory=True)."""
        tensors = {name: getattr(self, name).pin_memory()
                   for name in ("images", "targets", "padded_targets", "target_counts")}
        return dataclasses.replace(self, **tensors)

    def __len__(self) -> int:
        return self.images.shape[0]


def stack_images(images: Sequence[np.ndarray]) -> torch.Tensor:
    """(B, 3, H, W) uint8 from B (3, H, W) images, stored channels-last: each image's (H, W, 3) pixels go straight
    into their slot (one memcpy for to_network_layout's views), and in a DataLoader worker the batch is made in
    shared memory, so that handing it to the main process copies nothing. The CPU's channels-last model reads
    this layout as it is."""
    channels, height, width = images[0].shape
    shape = (len(images), height, width, channels)
    if torch.utils.data.get_worker_info() is not None:
        storage = torch.UntypedStorage._new_shared(math.prod(shape))  # as torch's default_collate does
        buffer = torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)
    else:
        buffer = torch.empty(shape, dtype=torch.uint8)
    slots = buffer.numpy()
    for slot, image in zip(slots, images):
        np.copyto(slot, image.transpose(1, 2, 0))
    return buffer.permute(0, 3, 1, 2)


def collate(samples: list[Sample]) -> Batch:
    """Stack samples into a Batch; all images of a batch have the same shape."""
    images = stack_images([sample.image for sample in samples])
    counts = [len(sample.labels) for sample in samples]
    rows = max(TARGET_BUCKET, math.ceil(max(counts, default=0) / TARGET_BUCKET) * TARGET_BUCKET)
    padded = torch.zeros((len(samples), rows, 5), dtype=torch.float32)
    padded[:, :, 0] = -1
    flat = []
    for index, sample in enumerate(samples):
        labels = torch.from_numpy(np.asarray(sample.labels, np.float32).reshape(-1, 5))
        padded[index, :len(labels)] = labels
        flat.append(torch.cat([torch.full((len(labels), 1), float(index)), labels], dim=1))
    return Batch(
        images=images,
        targets=torch.cat(flat, dim=0) if flat else torch.zeros((0, 6)),
        padded_targets=padded,
        target_counts=torch.tensor(counts, dtype=torch.int64),
        paths=tuple(sample.path for sample in samples),
        image_ids=tuple(sample.image_id for sample in samples),
        letterbox=tuple(sample.letterbox for sample in samples),
        problems=tuple(line for sample in samples for line in sample.problems),
        unusable_ids=tuple(sample.image_id for sample in samples if not sample.usable),
    )


def noise_batch(batch_size: int, imgsz: int, num_classes: int, seed: int) -> Batch:
    """A seeded batch of noise images with three boxes each: what a step's ops see when their values do not matter
    (doctor --ops records the step's ops on it; training times the teacher's cost on it)."""
    rng = np.random.default_rng(seed)
    samples = []
    for index in range(batch_size):
        image = rng.integers(0, 256, size=(3, imgsz, imgsz), dtype=np.uint8)
        centres, sizes = rng.uniform(0.3, 0.7, size=(3, 2)), rng.uniform(0.1, 0.4, size=(3, 2))
        labels = np.concatenate([rng.integers(num_classes, size=(3, 1)), centres, sizes], axis=1)
        samples.append(Sample(image=image, labels=labels.astype(np.float32), path=f"noise/{index}", image_id=index))
    return collate(samples)
