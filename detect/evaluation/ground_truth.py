"""COCO ground truth as COCOeval reads it: built from a split's checked labels, or a COCO json's, as it was read."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from detect.data.records import ImageRecord, RecordTable
from detect.ops.boxes import xywhn_to_xyxy, xyxy_to_ltwh

logger = logging.getLogger(__name__)


def ground_truth_from_records(records: Sequence[ImageRecord], class_names: Sequence[str],
                              category_ids: Sequence[int]) -> dict:
    """COCO ground-truth dict (pixel ltwh boxes, area w*h, iscrowd); class k is category_ids[k]."""
    images, annotations = [], []
    for record in records:
        image_id = int(record.image_id)
        images.append({"id": image_id, "width": int(record.width), "height": int(record.height),
                       "file_name": Path(record.path).name})
        normalised = np.asarray(record.boxes, dtype=np.float64).reshape(-1, 4)
        ltwh = xyxy_to_ltwh(xywhn_to_xyxy(normalised, record.width, record.height))
        for cls, box, crowd in zip(record.classes, ltwh.tolist(), record.crowd):
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": int(category_ids[int(cls)]), "bbox": box,
                                "area": box[2] * box[3], "iscrowd": int(bool(crowd))})
    categories = [{"id": int(category), "name": name} for category, name in zip(category_ids, class_names)]
    return {"images": images, "annotations": annotations, "categories": categories}


def complete_annotations(dataset: dict) -> dict:
    """`dataset` with COCOeval's two per-box keys where a tool left them out: `iscrowd` 0, `area` the box's."""
    for annotation in dataset.get("annotations", []):
        annotation.setdefault("iscrowd", 0)
        annotation.setdefault("area", float(annotation["bbox"][2]) * float(annotation["bbox"][3]))
    return dataset


def ground_truth_as_read(dataset: dict, records: RecordTable, path: Path) -> dict:
    """A COCO json's ground truth for the images that were read (`records`), each said in one line where it differs
    from the file: its images the split does not hold (not in the folder, or skipped by the label check) are not
    scored, as yolov5 scores only the images it evaluated; annotation ids that repeat are numbered anew (COCO's index
    keeps one box per id); the split's images the json does not list are background."""
    read = {int(image_id) for image_id in records.image_ids}
    images = [image for image in dataset["images"] if int(image["id"]) in read]
    if len(images) < len(dataset["images"]):
        logger.warning("%s: %d of its %d images are not in the split (not in the images folder, or skipped by the "
                       "label check): their boxes are not scored", path, len(dataset["images"]) - len(images),
                       len(dataset["images"]))
    annotations = [annotation for annotation in dataset.get("annotations", []) if int(annotation["image_id"]) in read]
    distinct = len({annotation.get("id") for annotation in annotations})
    if distinct < len(annotations):
        logger.warning("%s: its %d annotations have %d distinct ids: numbered 1..%d for scoring (COCO's index keeps "
                       "one box per id)", path, len(annotations), distinct, len(annotations))
        annotations = [{**annotation, "id": number} for number, annotation in enumerate(annotations, start=1)]
    listed = {int(image["id"]) for image in images}
    images += [{"id": int(record.image_id), "width": int(record.width), "height": int(record.height),
                "file_name": Path(record.path).name} for record in records if int(record.image_id) not in listed]
    return complete_annotations({**dataset, "images": images, "annotations": annotations})
