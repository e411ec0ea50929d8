"""Small hand-written label files for the format tests: black images of given sizes and a data yaml that names them."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import yaml

from detect.data import LabelledSplit, load_data_config, load_split


def write_images(folder: Path, sizes: dict[str, tuple[int, int]]) -> Path:
    """Black images `folder`/<name> of (width, height) each."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, (width, height) in sizes.items():
        cv2.imwrite(str(folder / name), np.zeros((height, width, 3), np.uint8))
    return folder


def data_yaml(root: Path, annotations: str, names: list[str] | None = ("a", "b"), **split: object) -> Path:
    """root/data.yaml whose train and val read `annotations` with the images of root/images."""
    entry = {"annotations": annotations, "images": "images", **split}
    content = {"path": str(root), "train": entry, "val": entry}
    if names is not None:
        content["names"] = list(names)
    path = root / "data.yaml"
    path.write_text(yaml.safe_dump(content))
    return path


def load(root: Path, annotations: str, names: list[str] | None = ("a", "b"), split: str = "val",
         **options: object) -> LabelledSplit:
    """The split of a data yaml written by data_yaml."""
    return load_split(load_data_config(data_yaml(root, annotations, names, **options)), split)


def rows_of(split: LabelledSplit) -> dict[str, list[list[float]]]:
    """Per image file name: its rows [class, cx, cy, w, h, crowd], rounded to 6 places."""
    return {record.path.name: [[int(cls), *np.round(box.astype(float), 6).tolist(), int(crowd)]
                               for cls, box, crowd in zip(record.classes, record.boxes, record.crowd)]
            for record in split.records}
