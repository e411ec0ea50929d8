"""The labels of a split written as each labelling tool exports them (COCO json, VOC folder, Label Studio json, CVAT
xml), for the tests: what a team would bring, made from records whose .txt labels are known."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np

from detect.data.records import ImageRecord
from detect.ops.boxes import xywhn_to_xyxy

FORMATS = ("coco", "voc", "label-studio", "cvat")


def pixel_corners(record: ImageRecord) -> np.ndarray:
    """(n, 4) x1 y1 x2 y2 pixels of a record's boxes."""
    return xywhn_to_xyxy(np.asarray(record.boxes, np.float64).reshape(-1, 4), record.width, record.height)


def write_coco(records: Sequence[ImageRecord], names: Sequence[str], path: Path, first_id: int = 1) -> Path:
    """A COCO instances json: category ids 10, 20, ... (not the class index), boxes in float pixels."""
    images, annotations = [], []
    for number, record in enumerate(records):
        images.append({"id": number + 7, "file_name": f"train2017/{record.path.name}", "width": int(record.width),
                       "height": int(record.height)})
        for cls, (x1, y1, x2, y2), crowd in zip(record.classes, pixel_corners(record).tolist(), record.crowd):
            annotations.append({"id": first_id + len(annotations), "image_id": number + 7,
                                "category_id": 10 * (int(cls) + 1), "bbox": [x1, y1, x2 - x1, y2 - y1],
                                "area": (x2 - x1) * (y2 - y1), "iscrowd": int(crowd)})
    categories = [{"id": 10 * (index + 1), "name": name} for index, name in enumerate(names)]
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories[::-1]}))
    return path


def write_voc(records: Sequence[ImageRecord], names: Sequence[str], folder: Path) -> Path:
    """One VOC .xml per image: 1-based integer pixels (x from xmin - 1 to xmax), crowd boxes as difficult."""
    folder.mkdir(parents=True, exist_ok=True)
    for record in records:
        objects = []
        for cls, (x1, y1, x2, y2), crowd in zip(record.classes, pixel_corners(record).tolist(), record.crowd):
            xmin, ymin, xmax, ymax = round(x1) + 1, round(y1) + 1, round(x2), round(y2)
            objects.append(f"<object><name>{names[int(cls)]}</name><pose>Unspecified</pose><truncated>0</truncated>"
                           f"<difficult>{int(crowd)}</difficult><bndbox><xmin>{xmin}</xmin><ymin>{ymin}</ymin>"
                           f"<xmax>{xmax}</xmax><ymax>{ymax}</ymax></bndbox></object>")
        (folder / f"{record.path.stem}.xml").write_text(
            f"<annotation><folder>VOC</folder><filename>{record.path.name}</filename><size><width>{record.width}"
            f"</width><height>{record.height}</height><depth>3</depth></size>{''.join(objects)}</annotation>\n")
    return folder


def write_label_studio(records: Sequence[ImageRecord], names: Sequence[str], path: Path) -> Path:
    """A Label Studio JSON export of uploaded images (`/data/upload/3/<8 hex>-<name>`), boxes in percent."""
    tasks = []
    for number, record in enumerate(records):
        results = []
        for cls, (cx, cy, w, h) in zip(record.classes, np.asarray(record.boxes, np.float64).reshape(-1, 4).tolist()):
            results.append({"type": "rectanglelabels", "from_name": "label", "to_name": "image",
                            "original_width": int(record.width), "original_height": int(record.height),
                            "value": {"x": (cx - w / 2) * 100, "y": (cy - h / 2) * 100, "width": w * 100,
                                      "height": h * 100, "rotation": 0, "rectanglelabels": [names[int(cls)]]}})
        tasks.append({"id": number + 1, "data": {"image": f"/data/upload/3/{number:08x}-{record.path.name}"},
                      "annotations": [{"id": number + 1, "was_cancelled": False, "result": results}],
                      "predictions": []})
    path.write_text(json.dumps(tasks))
    return path


def write_cvat(records: Sequence[ImageRecord], names: Sequence[str], path: Path) -> Path:
    """A CVAT for images 1.1 xml, boxes in float pixels, every other one occluded."""
    labels = "".join(f"<label><name>{name}</name><type>rectangle</type></label>" for name in names)
    images = []
    for number, record in enumerate(records):
        boxes = "".join(
            f'<box label={quoteattr(names[int(cls)])} occluded="{index % 2}" source="manual" xtl="{x1!r}" '
            f'ytl="{y1!r}" xbr="{x2!r}" ybr="{y2!r}" z_order="0"></box>'
            for index, (cls, (x1, y1, x2, y2)) in enumerate(zip(record.classes, pixel_corners(record).tolist())))
        images.append(f'<image id="{number}" name="train2017/{record.path.name}" width="{record.width}" '
                      f'height="{record.height}">{boxes}</image>')
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?>\n<annotations><version>1.1</version><meta><task>'
                    f'<labels>{labels}</labels></task></meta>{"".join(images)}</annotations>\n')
    return path


def write_format(name: str, records: Sequence[ImageRecord], names: Sequence[str], folder: Path) -> Path:
    """The labels of `records` in format `name` under `folder`; the path an `annotations:` key names."""
    writers = {"coco": (write_coco, "instances.json"), "voc": (write_voc, "Annotations"),
               "label-studio": (write_label_studio, "label_studio.json"), "cvat": (write_cvat, "annotations.xml")}
    writer, target = writers[name]
    folder.mkdir(parents=True, exist_ok=True)
    return writer(records, names, folder / target)
