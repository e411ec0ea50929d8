"""The host side of a batch: HSV and flips give yolov5's pixels in one pass each, and stack_images lays a batch
out channels-last in one copy per image, in shared memory when a DataLoader worker builds it."""

from __future__ import annotations

import cv2
import numpy as np
import torch

from detect.data.augment import transforms as augment
from detect.data.batch import Sample, collate, stack_images
from detect.data.datasets import to_network_layout


def yolov5_hsv(image: np.ndarray, gains: np.ndarray) -> np.ndarray:
    """yolov5's augment_hsv with given gains: split, a lookup table per channel, merge."""
    hue, saturation, value = cv2.split(cv2.cvtColor(image, cv2.COLOR_BGR2HSV))
    levels = np.arange(256, dtype=np.float64)
    tables = (((levels * gains[0]) % 180).astype(np.uint8), np.clip(levels * gains[1], 0, 255).astype(np.uint8),
              np.clip(levels * gains[2], 0, 255).astype(np.uint8))
    merged = cv2.merge([cv2.LUT(channel, table) for channel, table in zip((hue, saturation, value), tables)])
    return cv2.cvtColor(merged, cv2.COLOR_HSV2BGR)


def test_hsv_and_flips_give_the_reference_pixels() -> None:
    image = np.random.default_rng(0).integers(0, 256, (96, 128, 3), dtype=np.uint8)
    labels = np.array([[1, 10, 20, 50, 60]], np.float32)
    for seed in range(4):
        gains = np.random.default_rng(seed).uniform(-1, 1, 3) * [0.015, 0.7, 0.4] + 1
        jittered = augment.hsv_jitter(image, np.random.default_rng(seed), 0.015, 0.7, 0.4)
        np.testing.assert_array_equal(jittered, yolov5_hsv(image, gains))
    for horizontal, reference in ((True, image[:, ::-1]), (False, image[::-1])):
        flipped, _ = augment.flip(image, labels, horizontal)
        np.testing.assert_array_equal(flipped, reference)


def images(count: int) -> list[np.ndarray]:
    generator = np.random.default_rng(1)
    return [to_network_layout(generator.integers(0, 256, (32, 48, 3), dtype=np.uint8)) for _ in range(count)]


def test_stack_images_is_the_plain_stack_in_channels_last_memory() -> None:
    chw = images(3)
    stacked = stack_images(chw)
    assert stacked.shape == (3, 3, 32, 48) and stacked.dtype == torch.uint8
    assert stacked.is_contiguous(memory_format=torch.channels_last)
    np.testing.assert_array_equal(stacked.numpy(), np.stack(chw))
    np.testing.assert_array_equal(stack_images([np.ascontiguousarray(image) for image in chw]).numpy(), np.stack(chw))


class Samples(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.images = images(4)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> Sample:
        return Sample(self.images[index], np.zeros((0, 5), np.float32), f"{index}.jpg", index)


def collate_and_tell(samples: list[Sample]) -> tuple:
    """collate, and whether its images were in shared memory as the worker made them (before the hand-off)."""
    batch = collate(samples)
    return batch, batch.images.is_shared()


def test_a_worker_builds_the_batch_in_shared_memory() -> None:
    dataset = Samples()
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=1, collate_fn=collate_and_tell)
    batch, made_shared = next(iter(loader))
    assert made_shared and batch.images.is_contiguous(memory_format=torch.channels_last)
    np.testing.assert_array_equal(batch.images.numpy(), np.stack(dataset.images))
    assert not collate([dataset[0]]).images.is_shared()  # in the main process: plain memory
