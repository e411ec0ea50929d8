"""What a hub model takes as images, as yolov5's AutoShape takes them: paths, PIL images, RGB numpy arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image, ImageOps

from detect.data.images.load import read_failure, read_image
from detect.data.images.pixels import check_pixels
from detect.errors import UserError
from detect.inference.sample_images import sample_images

ImageLike = str | Path | np.ndarray | Image.Image


def to_bgr(image: ImageLike, index: int) -> tuple[str, np.ndarray]:
    """(file name for save, (h, w, 3) uint8 BGR) of one input. As yolov5's AutoShape: paths and PIL images are read
    with their EXIF rotation; numpy arrays are RGB, HWC or CHW, grey or with alpha."""
    if isinstance(image, (str, Path)):
        if str(image).startswith(("http://", "https://")):
            raise UserError(f"{image}: detect never downloads; save the image and pass its path")
        try:
            check_pixels(image)
            return Path(image).with_suffix(".jpg").name, read_image(Path(image))
        except OSError as error:
            raise UserError(read_failure(image, error)) from None
    if isinstance(image, Image.Image):
        name = Path(getattr(image, "filename", "") or f"image{index}").with_suffix(".jpg").name
        return name, rgb_to_bgr(np.asarray(ImageOps.exif_transpose(image).convert("RGB")))
    if isinstance(image, np.ndarray):
        return f"image{index}.jpg", rgb_to_bgr(image)
    raise UserError(f"cannot read a {type(image).__name__} as an image: give a path, a PIL image, an (h, w, 3) RGB "
                    f"numpy array, or a (B, 3, H, W) tensor")


def rgb_to_bgr(array: np.ndarray) -> np.ndarray:
    """An RGB array (HWC, CHW with under 5 channels, 2-D grey, or with alpha; any numeric dtype, 0-255) as
    contiguous (h, w, 3) uint8 BGR."""
    if array.ndim == 3 and array.shape[0] < 5:  # CHW, as a data loader lays it out
        array = array.transpose(1, 2, 0)
    if array.ndim == 2:
        array = np.repeat(array[..., None], 3, axis=2)
    if array.ndim != 3 or array.shape[2] < 3:
        raise UserError(f"an image array must be (h, w, 3) RGB, got shape {array.shape}")
    if array.dtype != np.uint8:
        array = np.clip(np.rint(array), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(array[..., 2::-1])  # drops an alpha channel, RGB -> BGR


def unique_names(names: list[str]) -> list[str]:
    """The names with a _2, _3 ... suffix on repeats, so that save() writes every image (yolov5 overwrites)."""
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{Path(name).stem}_{seen[name]}{Path(name).suffix}")
    return unique


def sample_inputs() -> list[Any]:
    """The bundled samples in each form a hub model takes: a path string, a Path, RGB numpy, PIL, and a blank."""
    paths = sample_images()
    return [str(paths[0]), paths[1], cv2.imread(str(paths[2]))[..., ::-1], Image.open(paths[0]),
            np.zeros((320, 640, 3))]
