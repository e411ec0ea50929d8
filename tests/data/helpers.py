"""Tiny on-the-fly datasets for the data tests: black images with filled white boxes and their YOLO labels."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import cv2
import numpy as np
import yaml

from detect.data import AugmentSettings
from detect.data.datasets import TrainDataset
from detect.data.records import ImageRecord

# Every augmentation off: a test turns on the ones it looks at.
STILL = AugmentSettings(hsv_h=0, hsv_s=0, hsv_v=0, degrees=0, translate=0, scale=0, shear=0, perspective=0,
                        flipud=0, fliplr=0, mosaic=0, mixup=0, albumentations_p=0)
SIZE = 32  # imgsz of RecordingDataset


def box_image(height: int, width: int, boxes_xyxy: list[tuple[int, int, int, int]]) -> np.ndarray:
    """(h, w, 3) black uint8 image with each box filled white (x2, y2 exclusive)."""
    image = np.zeros((height, width, 3), np.uint8)
    for x1, y1, x2, y2 in boxes_xyxy:
        image[y1:y2, x1:x2] = 255
    return image


def label_line(class_index: int, box: tuple[int, int, int, int], height: int, width: int) -> str:
    """A YOLO label row for a pixel box."""
    x1, y1, x2, y2 = box
    return f"{class_index} {(x1 + x2) / 2 / width:.8f} {(y1 + y2) / 2 / height:.8f} {(x2 - x1) / width:.8f} {(y2 - y1) / height:.8f}"


def write_sample(root: Path, split: str, name: str, height: int, width: int,
                 boxes: list[tuple[int, int, int, int]], classes: list[int] | None = None, suffix: str = ".png") -> Path:
    """Write images/<split>/<name><suffix> and labels/<split>/<name>.txt; returns the image path."""
    image_path = root / "images" / split / f"{name}{suffix}"
    label_path = root / "labels" / split / f"{name}.txt"
    image_path.parent.mkdir(parents=True, exist_ok=True)
    label_path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(image_path), box_image(height, width, boxes))
    classes = classes or [index % 3 for index in range(len(boxes))]
    label_path.write_text("".join(label_line(c, box, height, width) + "\n" for c, box in zip(classes, boxes)))
    return image_path


def write_yaml(root: Path, names: tuple[str, ...] = ("a", "b", "c"), **extra: object) -> Path:
    """A data yaml at root/data.yaml with train and val both images/train unless overridden."""
    content = {"path": str(root), "train": "images/train", "val": "images/train", "names": list(names), **extra}
    path = root / "data.yaml"
    path.write_text(yaml.safe_dump(content))
    return path


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def write_flat_png(path: Path, width: int, height: int, rows: int = 64) -> Path:
    """A black 8-bit grey PNG, written without its pixels in memory: a 30000x30000 one takes 0.3 s and 0.9 MB on
    disk, and 2.7 GB once cv2 decodes it. Its rows are deflated `rows` at a time, each block after a full flush, so
    one compressed block serves them all."""
    row = bytes(width + 1)  # filter byte 0, then the pixels
    count, rest = divmod(height, rows)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflate.compress(row * rows) + deflate.flush(zlib.Z_FULL_FLUSH)
    tail = deflate.compress(row * rest) + deflate.flush()
    checksum = 1
    for _ in range(count):
        checksum = zlib.adler32(row * rows, checksum)
    checksum = zlib.adler32(row * rest, checksum)
    pixels = b"\x78\xda" + block * count + tail + struct.pack(">I", checksum)
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", pixels)
                     + _png_chunk(b"IEND", b""))
    return path


def white_extent(image_hwc: np.ndarray, threshold: int = 128) -> tuple[int, int, int, int] | None:
    """(x1, y1, x2, y2) exclusive extent of bright pixels in an RGB/BGR image, or None."""
    mask = image_hwc.min(axis=2) > threshold
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return None
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def simple_dataset(root: Path, count: int = 8) -> Path:
    """`count` images of mixed sizes, two boxes each; returns the yaml path."""
    for index in range(count):
        height, width = (120 + 20 * (index % 3), 160 + 30 * (index % 4))
        write_sample(root, "train", f"{index:04d}", height, width, [(10, 12, 50, 60), (70, 30, 110, 90)])
    return write_yaml(root)


class RecordingDataset(TrainDataset):
    """`count` flat SIZE x SIZE images whose pixel value is their index, one box each; every load is recorded and
    the indices in `broken` fail to load as an unreadable file would."""

    def __init__(self, count: int, settings: AugmentSettings, broken: frozenset[int] = frozenset()) -> None:
        box = np.array([[0.5, 0.5, 0.5, 0.5]], np.float32)
        records = [ImageRecord(path=Path(f"{index}.png"), image_id=index, width=SIZE, height=SIZE,
                               classes=np.zeros(1, np.int64), boxes=box, crowd=np.zeros(1, bool))
                   for index in range(count)]
        super().__init__(records, settings, imgsz=SIZE, seed=0)
        self.loads: list[int] = []
        self.broken = broken

    def load(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        self.loads.append(index)
        if index in self.broken:
            raise RuntimeError("decoder failed")  # any exception, not only ours
        return np.full((SIZE, SIZE, 3), index, np.uint8), np.array([[0, 0.5, 0.5, 0.5, 0.5]], np.float32)
