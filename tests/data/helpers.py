"""Tiny on-the-fly datasets for the data tests: black images with filled white boxes and their YOLO labels."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import yaml


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
                 boxes: list[tuple[int, int, int, int]], classes: list[int] | None = None) -> Path:
    """Write images/<split>/<name>.png and labels/<split>/<name>.txt; returns the image path."""
    image_path = root / "images" / split / f"{name}.png"
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
