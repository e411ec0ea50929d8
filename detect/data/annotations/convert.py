"""`python -m detect.data convert`: a dataset's checked labels written as yolov5's layout (images/ and labels/ folders
of .txt) or as a COCO json per split, with a data yaml that reads them."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import yaml

from detect.data.categories import yolo_category_ids
from detect.data.data_config import DataConfig
from detect.data.labels.split import LabelledSplit, load_split
from detect.ops.boxes import xywhn_to_xyxy, xyxy_to_ltwh

LOGGER = logging.getLogger(__name__)
TARGETS = ("yolo", "coco")


def _relative_name(image: Path, sources: tuple[Path, ...]) -> Path:
    """An image's path under the split's folder that holds it (its subfolders kept), else its file name."""
    for source in sources:
        if source.is_dir() and image.is_relative_to(source):
            return image.relative_to(source)
    return Path(image.name)


def _write_yolo_split(split: LabelledSplit, sources: tuple[Path, ...], out: Path, name: str, copy: bool) -> None:
    """out/images/<name>/... (links to the images, or copies) and out/labels/<name>/....txt without crowd boxes
    (yolov5's .txt has no crowd flag; its converter leaves them out too)."""
    for record in split.records:
        relative = _relative_name(Path(record.path), sources)
        image, label = out / "images" / name / relative, (out / "labels" / name / relative).with_suffix(".txt")
        image.parent.mkdir(parents=True, exist_ok=True)
        label.parent.mkdir(parents=True, exist_ok=True)
        image.unlink(missing_ok=True)
        if copy:
            shutil.copy2(record.path, image)
        else:
            image.symlink_to(Path(record.path).resolve())
        classes, boxes = record.train_boxes
        label.write_text("".join(f"{int(cls)} {' '.join(f'{value:.6f}' for value in box)}\n"
                                 for cls, box in zip(classes, boxes.tolist())))


def coco_dict(split: LabelledSplit) -> dict:
    """A COCO instances dict of the split's records (crowd boxes as iscrowd 1), category ids as the split's."""
    category_ids = split.category_ids or list(yolo_category_ids(split.names))
    images, annotations = [], []
    for record in split.records:
        images.append({"id": int(record.image_id), "file_name": Path(record.path).name, "width": int(record.width),
                       "height": int(record.height)})
        ltwh = xyxy_to_ltwh(xywhn_to_xyxy(np.asarray(record.boxes, np.float64).reshape(-1, 4), record.width,
                                          record.height))
        for cls, box, crowd in zip(record.classes, ltwh.tolist(), record.crowd):
            annotations.append({"id": len(annotations) + 1, "image_id": int(record.image_id),
                                "category_id": int(category_ids[int(cls)]), "bbox": box, "area": box[2] * box[3],
                                "iscrowd": int(bool(crowd))})
    categories = [{"id": int(category), "name": name} for category, name in zip(category_ids, split.names)]
    return {"images": images, "annotations": annotations, "categories": categories}


def convert(config: DataConfig, to: str, out: Path, copy: bool = False, cache_dir: str | None = None) -> Path:
    """Write every split of `config` as `to` ("yolo" or "coco") under `out`; the data yaml written there."""
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    spec: dict = {"path": str(out), "names": list(config.names)}
    for name in config.splits:
        split = load_split(config, name, cache_dir=cache_dir)
        if to == "yolo":
            _write_yolo_split(split, config.splits[name], out, name, copy)
            spec[name] = f"images/{name}"
        else:
            listing = out / f"{name}.txt"
            listing.write_text("".join(os.fsdecode(path) + "\n" for path in split.records.paths))
            (out / f"{name}.json").write_text(json.dumps(coco_dict(split)))
            spec[name] = {"annotations": f"{name}.json", "images": listing.name, "format": "coco"}
    target = out / "data.yaml"
    target.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    LOGGER.info("%s: %d splits written as %s", target, len(config.splits), to)
    return target
