"""Decode an image and resize its long side to imgsz, exactly as yolov5 (docs/yolov5.md, "Image load")."""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

from detect.data.storage.interface import Storage
from detect.data.storage.local import LOCAL


def decode_truncated_jpeg(data: bytes) -> np.ndarray | None:
    """Decode a JPEG whose end is missing: with the end-of-image marker appended, libjpeg keeps what it has."""
    return cv2.imdecode(np.frombuffer(data + b"\xff\xd9", np.uint8), cv2.IMREAD_COLOR)



def read_image(path: Path, storage: Storage = LOCAL) -> np.ndarray:
    """(h, w, 3) uint8 BGR with EXIF rotation applied (cv2.imread's default); OSError if it cannot be decoded or
    is not a regular file (a FIFO put in its place would block the reader). Fetched by `storage` first (a
    bucket's)."""
    storage.local_file(path)
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:  # a JPEG cut short that the label check accepted (with a note)
        image = decode_truncated_jpeg(path.read_bytes())
    if image is None:
        raise OSError("cannot decode the image (it passed the label check; was it changed since?)")
    return image


def read_failure(path: Path | str, error: Exception) -> str:
    """One line "<path>: <error type>: <message>" for an image that could not be read."""
    message = str(error).strip().splitlines()
    return f"{path}: {type(error).__name__}" + (f": {message[0]}" if message else "")


def resized_shape(height: int, width: int, imgsz: int | None) -> tuple[int, int]:
    """(h, w) after the load resize: ratio imgsz / max(h0, w0), sides rounded up (docs/yolov5.md, "Image load");
    imgsz None: the image as decoded (tiles crop windows from it)."""
    if imgsz is None:
        return height, width
    ratio = imgsz / max(height, width)
    if ratio == 1:
        return height, width
    return math.ceil(height * ratio), math.ceil(width * ratio)


def resized_shapes(heights: np.ndarray, widths: np.ndarray, imgsz: int | None) -> tuple[np.ndarray, np.ndarray]:
    """resized_shape of N images at once: ((N,) heights, (N,) widths) int64."""
    if imgsz is None:
        return np.asarray(heights, np.int64), np.asarray(widths, np.int64)
    heights, widths = np.asarray(heights, np.float64), np.asarray(widths, np.float64)
    ratio = imgsz / np.maximum(heights, widths)
    same = ratio == 1
    return (np.where(same, heights, np.ceil(heights * ratio)).astype(np.int64),
            np.where(same, widths, np.ceil(widths * ratio)).astype(np.int64))


def resize_to_imgsz(image: np.ndarray, imgsz: int | None, augment: bool) -> np.ndarray:
    """Resize so the long side is imgsz: INTER_AREA when shrinking without augmentation, else INTER_LINEAR; imgsz
    None: as it is."""
    if imgsz is None:
        return image
    height, width = image.shape[:2]
    new_height, new_width = resized_shape(height, width, imgsz)
    if (new_height, new_width) == (height, width):
        return image
    shrinking = imgsz / max(height, width) < 1
    interpolation = cv2.INTER_AREA if shrinking and not augment else cv2.INTER_LINEAR
    return cv2.resize(image, (new_width, new_height), interpolation=interpolation)


def load_resized(path: Path, imgsz: int | None, augment: bool, storage: Storage = LOCAL) -> np.ndarray:
    """Decode (read_image) and resize (the unit the RAM cache stores)."""
    return resize_to_imgsz(read_image(path, storage), imgsz, augment)
