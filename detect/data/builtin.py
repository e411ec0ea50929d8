"""The built-in "shapes" dataset: procedural scenes generated deterministically on first use (no download)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import cv2
import numpy as np

from detect.atomic_file import make_folder, remove_tree, replace_folder, write_image, write_text
from detect.data.data_config import DATA_DIR_VARIABLE, DataConfig
from detect.errors import UserError
from detect.ops.boxes import xyxy_to_xywhn

LOGGER = logging.getLogger(__name__)

SHAPE_NAMES = ("circle", "rectangle", "triangle", "cross", "ring")
SPLIT_SIZES = {"train": 300, "val": 100}
GENERATOR_VERSION = "shapes-2"  # bump when the scenes change: an old folder is then regenerated
# What a scene holds (shapes-2): 2-6 shapes, each side 15-40% of the image's short side, mostly apart, in a colour
# that stands out from the ground; 2-7 strokes of clutter. shapes-1's 1-6 shapes of 6-45% in any colour among 5-14
# strokes took a from-scratch yolov5s far longer to learn than the README's first run has (docs/testing.md, "The
# first run").
SHAPES_PER_IMAGE, SHAPE_SIDE, STROKES = (2, 7), (0.15, 0.40), (2, 8)
PLACES_TRIED, CONTRAST = 20, 150


def _background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Clutter: a smooth colour field, random strokes and pixel noise."""
    coarse = rng.integers(40, 215, size=(4, 4, 3), dtype=np.uint8)
    image = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
    for _ in range(int(rng.integers(*STROKES))):
        start = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        end = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        cv2.line(image, start, end, rng.integers(0, 255, 3).tolist(), int(rng.integers(1, 4)))
    noise = rng.normal(0, 8, image.shape)
    return np.clip(image + noise, 0, 255).astype(np.uint8)


def _shape_mask(rng: np.random.Generator, kind: int, height: int, width: int) -> np.ndarray:
    """A filled mask of one shape of random size, aspect ratio and place."""
    mask = np.zeros((height, width), np.uint8)
    size = rng.uniform(*SHAPE_SIDE) * min(height, width)
    aspect = rng.uniform(0.5, 2.0)
    half_w, half_h = max(4, size * np.sqrt(aspect) / 2), max(4, size / np.sqrt(aspect) / 2)
    cx, cy = rng.uniform(half_w, width - half_w), rng.uniform(half_h, height - half_h)
    centre, axes = (int(cx), int(cy)), (int(half_w), int(half_h))
    if kind == 0:
        cv2.ellipse(mask, centre, axes, 0, 0, 360, 255, -1)
    elif kind == 1:
        cv2.rectangle(mask, (int(cx - half_w), int(cy - half_h)), (int(cx + half_w), int(cy + half_h)), 255, -1)
    elif kind == 2:
        points = np.array([[cx, cy - half_h], [cx - half_w, cy + half_h], [cx + half_w, cy + half_h]], np.int32)
        cv2.fillPoly(mask, [points], 255)
    elif kind == 3:
        bar_w, bar_h = max(2, int(half_w / 3)), max(2, int(half_h / 3))
        cv2.rectangle(mask, (int(cx - half_w), int(cy) - bar_h), (int(cx + half_w), int(cy) + bar_h), 255, -1)
        cv2.rectangle(mask, (int(cx) - bar_w, int(cy - half_h)), (int(cx) + bar_w, int(cy + half_h)), 255, -1)
    else:
        cv2.ellipse(mask, centre, axes, 0, 0, 360, 255, max(2, int(min(half_w, half_h) / 3)))
    return mask


def _apart(extent: np.ndarray, placed: list[np.ndarray]) -> bool:
    """Whether a shape's extent overlaps every one placed before by less than a tenth of the smaller of the two."""
    for other in placed:
        width = min(extent[2], other[2]) - max(extent[0], other[0])
        height = min(extent[3], other[3]) - max(extent[1], other[1])
        smaller = min((extent[2:] - extent[:2]).prod(), (other[2:] - other[:2]).prod())
        if width > 0 and height > 0 and width * height > 0.1 * smaller:
            return False
    return True


def _colour_against(rng: np.random.Generator, background: np.ndarray) -> np.ndarray:
    """A random colour at least CONTRAST (sum of channel differences) from the mean of `background`'s pixels."""
    mean = background.reshape(-1, 3).mean(axis=0)
    for _ in range(20):
        colour = rng.integers(0, 256, 3)
        if np.abs(colour - mean).sum() >= CONTRAST:
            return colour
    return np.where(mean < 128, 255, 0)  # the far corner of the colour cube


def _scene(rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    """One image and its YOLO label lines: shapes mostly apart (a place is drawn again for one that would hide most
    of another), each in a colour that stands out from the ground under it."""
    height, width = int(rng.integers(224, 417)), int(rng.integers(256, 417))
    image = _background(rng, height, width)
    lines, placed = [], []
    for _ in range(int(rng.integers(*SHAPES_PER_IMAGE))):
        kind = int(rng.integers(len(SHAPE_NAMES)))
        for _ in range(PLACES_TRIED):
            mask = _shape_mask(rng, kind, height, width)
            ys, xs = np.nonzero(mask)
            extent = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])  # pixel-exact extent of the shape
            if _apart(extent, placed):
                break
        placed.append(extent)
        image[mask > 0] = _colour_against(rng, image[mask > 0])
        lines.append(f"{kind} " + " ".join(f"{value:.6f}" for value in xyxy_to_xywhn(extent, width, height)))
    return image, lines


def generate_shapes(root: Path, seed: int = 0) -> None:
    """Write images/{train,val} and labels/{train,val} under root (atomically: a temp folder renamed). The dataset is
    ours, made again whenever it is stale: its writes are a cache's (atomic_file)."""
    staging = root.with_name(f"{root.name}.{os.getpid()}.tmp")
    remove_tree(staging, cache=True)
    rng = np.random.default_rng(seed)
    for split, count in SPLIT_SIZES.items():
        make_folder(staging / "images" / split, cache=True)
        for index in range(count):
            image, lines = _scene(rng)
            write_image(staging / "images" / split / f"{index:06d}.jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 92],
                        cache=True)
            write_text(staging / "labels" / split / f"{index:06d}.txt", "\n".join(lines) + "\n", cache=True)
    write_text(staging / "VERSION", GENERATOR_VERSION + "\n", cache=True)
    remove_tree(root, cache=True)
    replace_folder(staging, root, cache=True)


def ensure_builtin(config: DataConfig) -> None:
    """Generate the built-in dataset named by the yaml's `builtin` key if it is missing or from another version."""
    if config.builtin != "shapes":
        raise UserError(f"{config.source}: unknown builtin dataset '{config.builtin}' (known: shapes)")
    marker = config.root / "VERSION"
    if marker.is_file() and marker.read_text().strip() == GENERATOR_VERSION:
        return
    if config.root.is_dir() and not marker.is_file() and any(config.root.iterdir()):
        # Generating replaces the whole folder: never one that holds anything but a dataset generated earlier.
        raise UserError(f"{config.root} is not empty and holds no generated dataset; "
                        f"point the yaml's path (or {DATA_DIR_VARIABLE}) at a new folder")
    LOGGER.info("generating the built-in shapes dataset in %s", config.root)
    try:
        make_folder(config.root.parent, cache=True)
        generate_shapes(config.root)
    except OSError as error:
        raise UserError(f"cannot write the built-in dataset to {config.root} ({error.strerror}); "
                        f"set {DATA_DIR_VARIABLE} to a writable folder") from None
