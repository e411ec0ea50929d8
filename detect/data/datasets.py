"""torch Datasets: augmented training samples (mosaic etc.) and letterboxed rectangular validation samples."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

import cv2
import numpy as np
import torch

from detect.data.augment import transforms as augment
from detect.data.augment.albument import build_albumentations
from detect.data.augment.mosaic import mosaic4
from detect.data.augment.settings import AugmentSettings
from detect.data.batch import Sample
from detect.data.images.disk_cache import DiskImages
from detect.data.images.letterbox import PAD_VALUE, LetterboxInfo, letterbox, rect_batch_shapes
from detect.data.images.load import (
    load_resized,
    read_failure,
    read_image,
    resize_to_imgsz,
)
from detect.data.images.ram_cache import RamImages
from detect.data.records import ImageRecord, RecordTable
from detect.data.storage.interface import Storage
from detect.data.storage.local import LOCAL
from detect.data.tiles.images import WindowImages
from detect.data.tiles.windows import TileSettings
from detect.errors import UserError
from detect.ops.boxes import xywhn_to_xyxy, xyxy_to_xywhn
from detect.ops.windows import window_count

# A training sample gives up after this many unreadable images in a row: one bad file is replaced, but this many
# means the dataset itself is gone (an unmounted disk, a deleted folder) and the run should stop and say so.
MAX_FAILURES = 10


# Decoded, resized training images by index: --cache ram or disk, tiles' windows, or a plain list (a benchmark's, a
# test's).
ImageStore = RamImages | DiskImages | WindowImages | Sequence[np.ndarray]


def _reordered(cached: ImageStore | None, order: np.ndarray) -> ImageStore | None:
    """`cached` in `order` (the stores reorder without copying images)."""
    if cached is None or isinstance(cached, RamImages | DiskImages | WindowImages):
        return None if cached is None else cached.take(order)
    return [cached[index] for index in order]


def to_network_layout(image: np.ndarray) -> np.ndarray:
    """(h, w, 3) BGR -> (3, h, w) RGB: a view of contiguous (h, w, 3) RGB pixels, which stack_images copies into
    its batch in one pass."""
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB).transpose(2, 0, 1)


class TrainDataset(torch.utils.data.Dataset):
    """Training samples of imgsz x imgsz: mosaic (or letterbox), warp, mixup, albumentations, HSV, flips.

    An image that cannot be read is replaced by another drawn from the sample's own generator (so the run stays
    reproducible) and named in the sample's problems; a worker never raises for one bad file.
    """

    def __init__(self, records: Sequence[ImageRecord], settings: AugmentSettings, imgsz: int, seed: int,
                 cached: ImageStore | None = None, storage: Storage = LOCAL) -> None:
        self.records = RecordTable.from_records(records)  # flat: worker memory stays flat over an epoch
        self.settings, self.imgsz, self.seed, self.cached = settings, imgsz, seed, cached
        self.storage = storage
        self.rng = np.random.default_rng(seed)
        self.albumentations = build_albumentations(settings.albumentations_p)

    def __len__(self) -> int:
        return len(self.records)

    def for_thread(self) -> TrainDataset:
        """A shallow copy with its own generator and albumentations stage, to make samples in another thread."""
        copied = copy.copy(self)
        copied.albumentations = build_albumentations(self.settings.albumentations_p)
        return copied

    def reseed(self, *keys: int) -> None:
        """A fresh generator from (seed, *keys)."""
        self.rng = np.random.default_rng([self.seed, *keys])

    def load(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(image resized to imgsz, (n, 5) non-crowd labels [cls, cx, cy, w, h] normalised)."""
        record = self.records[index]
        image = self.cached[index] if self.cached is not None else load_resized(record.path, self.imgsz, True,
                                                                                self.storage)
        classes, boxes = record.train_boxes
        return image, np.concatenate([classes[:, None].astype(np.float32), boxes], axis=1)

    def _load_any(self, index: int, problems: list[str]) -> tuple[int, np.ndarray, np.ndarray]:
        """(index loaded, image, labels): `index`, or if it cannot be read a random other one (failures recorded)."""
        for _ in range(MAX_FAILURES):
            try:
                return (index, *self.load(index))
            except Exception as error:  # noqa: BLE001 (a decoder may raise anything; one file must not end a run)
                problems.append(read_failure(self.records[index].path, error))
                failed, index = self.records[index].path, int(self.rng.integers(len(self.records)))
        raise UserError(f"{MAX_FAILURES} images in a row could not be read (the last: {failed}); the dataset looks "
                        "broken: is its disk or folder still there?")

    def input_shape(self, index: int) -> tuple[int, int]:
        """(height, width) of sample `index` as the network sees it."""
        return self.imgsz, self.imgsz

    def _mosaic(self, index: int, problems: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
        """Mosaic of `index` and three random images, warped: (image, (n, 5) labels pixels xyxy, own index used)."""
        indices = [index, *self.rng.integers(0, len(self.records), size=3).tolist()]
        self.rng.shuffle(indices)  # the own image takes a random quadrant, as in yolov5
        loaded = [self._load_any(position, problems) for position in indices]
        image, labels = mosaic4([piece[1:] for piece in loaded], self.imgsz, self.rng, self.settings.warp)
        return image, labels, loaded[indices.index(index)][0]

    def _single(self, index: int, problems: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
        """One image letterboxed to its input shape, warped: (image, (n, 5) labels pixels xyxy, index used)."""
        used, image, labels = self._load_any(index, problems)
        height, width = image.shape[:2]
        image, ratio, pad = letterbox(image, self.input_shape(index), scale_up=True)
        pixels = xywhn_to_xyxy(labels[:, 1:], ratio * width, ratio * height, pad[0], pad[1])
        labels = np.concatenate([labels[:, :1], pixels], axis=1)
        return (*augment.random_warp(image, labels, self.rng, self.settings.warp), used)

    def __getitem__(self, key: int | tuple[int, int]) -> Sample:
        """Sample `key`: an index, or (epoch, index) from EpochBatchSampler, whose randomness is then a function of
        (seed, epoch, index) alone, so a run is the same for any number of workers and on resume."""
        if isinstance(key, tuple):
            epoch, index = key
            self.reseed(epoch, index)
        else:
            index = key
        settings, rng, problems = self.settings, self.rng, []
        if rng.random() < settings.mosaic:
            image, labels, used = self._mosaic(index, problems)
            if rng.random() < settings.mixup:  # yolov5 blends a mosaic with another mosaic only
                partner = self._mosaic(int(rng.integers(len(self.records))), problems)
                image, labels = augment.mixup((image, labels), partner[:2], rng)
        else:
            image, labels, used = self._single(index, problems)
        if self.albumentations is not None:
            image = self.albumentations(image, int(rng.integers(2**31)))
        image = augment.hsv_jitter(image, rng, settings.hsv_h, settings.hsv_s, settings.hsv_v)
        if rng.random() < settings.flipud:
            image, labels = augment.flip(image, labels, horizontal=False)
        if rng.random() < settings.fliplr:
            image, labels = augment.flip(image, labels, horizontal=True)
        labels = augment.degenerate_free(labels)
        height, width = image.shape[:2]
        normalised = np.concatenate([labels[:, :1], xyxy_to_xywhn(labels[:, 1:], width, height)], axis=1)
        record = self.records[used]
        return Sample(image=to_network_layout(image), labels=normalised, path=str(record.path),
                      image_id=record.image_id, problems=tuple(problems))


class RectTrainDataset(TrainDataset):
    """yolov5's --rect training: images in aspect-ratio order, each letterboxed to its batch's shape (pad 0), no
    mosaic or mixup; warp, albumentations, HSV and flips as in TrainDataset."""

    def __init__(self, records: Sequence[ImageRecord], settings: AugmentSettings, imgsz: int, seed: int,
                 batch_size: int, stride: int = 32, cached: ImageStore | None = None,
                 storage: Storage = LOCAL) -> None:
        table = RecordTable.from_records(records)
        order, self.shapes = rect_batch_shapes(table.heights.astype(np.float64), table.widths.astype(np.float64),
                                               batch_size, imgsz, stride, pad=0.0)
        super().__init__(table.take(order), dataclasses.replace(settings, mosaic=0.0, mixup=0.0), imgsz, seed,
                         _reordered(cached, order), storage)
        self.batch_size = batch_size

    def input_shape(self, index: int) -> tuple[int, int]:
        """The shape of the aspect-ratio batch that sample `index` belongs to."""
        height, width = self.shapes[index // self.batch_size]
        return int(height), int(width)


class ValDataset(torch.utils.data.Dataset):
    """Validation samples in aspect-ratio order, letterboxed to their batch's shape (docs/yolov5.md, "Rect batches");
    with `windows` (sliced inference), each image as decoded, one a batch, and an image that would need more than
    windows.max_windows windows skipped by name before it is decoded.

    An image that cannot be read becomes a grey placeholder of the same shape with no labels and usable False,
    so the batch keeps its shape; the evaluation leaves it out and reports the problem.
    """

    def __init__(self, records: Sequence[ImageRecord], imgsz: int, batch_size: int, stride: int = 32,
                 rect: bool = True, pad: float = 0.5, storage: Storage = LOCAL,
                 windows: TileSettings | None = None) -> None:
        self.windows = windows  # sliced inference's: each image at full resolution, alone in its batch
        table = RecordTable.from_records(records)
        order, shapes = rect_batch_shapes(table.heights.astype(np.float64), table.widths.astype(np.float64),
                                          batch_size, imgsz, stride, pad)
        self.records = table.take(order) if rect else table
        self.shapes = shapes if rect else np.full((len(shapes), 2), imgsz)
        self.imgsz, self.batch_size, self.storage = imgsz, batch_size, storage

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> Sample:
        record = self.records[index]
        if self.windows is not None:
            return self._full_resolution(record)
        classes, boxes = record.train_boxes
        try:
            original, problems = read_image(record.path, self.storage), ()
        except Exception as error:  # noqa: BLE001 (a decoder may raise anything; one file must not end a run)
            # the placeholder goes through the same resize and letterbox, so its shape and LetterboxInfo are the
            # ones the real image would have had
            original = np.full((record.height, record.width, 3), PAD_VALUE, np.uint8)
            problems, classes, boxes = (read_failure(record.path, error),), classes[:0], boxes[:0]
        original_height, original_width = original.shape[:2]
        image = resize_to_imgsz(original, self.imgsz, augment=False)
        height, width = image.shape[:2]
        shape = tuple(int(side) for side in self.shapes[index // self.batch_size])
        image, ratio, pad = letterbox(image, shape, scale_up=False)
        info = LetterboxInfo(original=(original_height, original_width), gain=ratio * height / original_height, pad=pad)
        pixels = xywhn_to_xyxy(boxes, ratio * width, ratio * height, pad[0], pad[1])
        normalised = xyxy_to_xywhn(pixels, shape[1], shape[0])
        labels = np.concatenate([classes[:, None].astype(np.float32), normalised], axis=1)
        return Sample(image=to_network_layout(image), labels=labels, path=str(record.path),
                      image_id=record.image_id, letterbox=info, problems=problems, usable=not problems)

    def _full_resolution(self, record: ImageRecord) -> Sample:
        """The image as decoded (sliced inference windows it), its labels normalised to it; a placeholder (usable
        False) for an image that cannot be read or would need more windows than the bound."""
        windows, classes, boxes = self.windows, *record.train_boxes
        needed = window_count(record.height, record.width, windows.size, windows.overlap)
        info = LetterboxInfo(original=(record.height, record.width), gain=1.0, pad=(0.0, 0.0))
        try:
            if needed > windows.max_windows:
                raise TooManyWindowsError(f"{record.width}x{record.height} needs {needed} windows of {windows.size} px "
                                          f"at overlap {windows.overlap:g}, more than --max-windows "
                                          f"{windows.max_windows}")
            image, problems = read_image(record.path, self.storage), ()
        except Exception as error:  # noqa: BLE001 (a decoder may raise anything; one file must not end a run)
            image, problems = np.full((32, 32, 3), PAD_VALUE, np.uint8), (read_failure(record.path, error),)
            info = dataclasses.replace(info, original=(32, 32))
        labels = np.concatenate([classes[:, None].astype(np.float32), boxes], axis=1)
        return Sample(image=to_network_layout(image), labels=labels[:0] if problems else labels, path=str(record.path),
                      image_id=record.image_id, letterbox=info, problems=problems, usable=not problems)


class TooManyWindowsError(ValueError):
    """An image that would need more windows than sliced inference's bound (named in the val problems)."""
