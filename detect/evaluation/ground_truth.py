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


def numbered_for_scoring(annotations: list[dict], path: Path | str) -> list[dict]:
    """`annotations` as COCOeval can tell them apart, said in one line where they are numbered anew: 1..n where an id
    repeats (COCO's index keeps one box per id), is missing, or is 0 or less (COCOeval's matching reads 0 as
    'unmatched', and faster-coco-eval scores a box of a negative id as never matched)."""
    ids = [annotation.get("id") for annotation in annotations]
    distinct = len(set(ids))
    if distinct == len(ids) and all(isinstance(number, int) and number > 0 for number in ids):
        return annotations
    why = (f"{distinct} distinct ids" if distinct < len(ids) else
           "an annotation without an id" if None in ids else "ids of 0 or less, which COCOeval cannot match")
    logger.warning("%s: its %d annotations have %s: numbered 1..%d for scoring (COCO's index keeps one box per id)",
                   path, len(annotations), why, len(annotations))
    return [{**annotation, "id": number} for number, annotation in enumerate(annotations, start=1)]


def ground_truth_as_read(dataset: dict, records: RecordTable, path: Path) -> dict:
    """A COCO json's ground truth (normalised: data/annotations/coco_values.py) for the images that were read
    (`records`), each said in one line where it differs from the file: its images the split does not hold (not in the
    folder, or skipped by the label check) are not scored, as yolov5 scores only the images it evaluated; annotation
    ids are numbered anew where COCOeval could not tell them apart (numbered_for_scoring); the split's images the json
    does not list are background."""
    read = {int(image_id) for image_id in records.image_ids}
    images = [image for image in dataset["images"] if int(image["id"]) in read]
    if len(images) < len(dataset["images"]):
        logger.warning("%s: %d of its %d images are not in the split (not in the images folder, or skipped by the "
                       "label check): their boxes are not scored", path, len(dataset["images"]) - len(images),
                       len(dataset["images"]))
    annotations = numbered_for_scoring([annotation for annotation in dataset["annotations"]
                                        if annotation["image_id"] in read], path)
    listed = {int(image["id"]) for image in images}
    images += [{"id": int(record.image_id), "width": int(record.width), "height": int(record.height),
                "file_name": Path(record.path).name} for record in records if int(record.image_id) not in listed]
    return {**dataset, "images": images, "annotations": annotations}
