"""Where a split's labels come from: the .txt file beside each image (yolov5's rule), or a label file (a COCO json,
VOC, Label Studio, CVAT: data/annotations) fetched from the split's storage and read; where the label cache of
those labels usually goes, and the files its key covers."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import numpy as np

from detect import atomic_file
from detect.data.annotations.formats import AnnotationSource, read_split_labels
from detect.data.data_config import DataConfig
from detect.data.records import label_path_for
from detect.data.storage.interface import Storage

LOGGER = logging.getLogger(__name__)

# Our label cache sits beside the labels as <split folder>.detect.cache: yolov5 keeps its own (a numpy pickle) at
# <split folder>.cache, and with one name each tool would find the other's file unreadable and re-check every image.
CACHE_SUFFIX = ".detect.cache"


@dataclasses.dataclass(frozen=True, eq=False)
class LabelSources:
    """Per image a .txt label file or (rows, crowd) given; the COCO json and its ids, if any; whether the labels
    name their classes (then the cache's key holds the names); the usual place of the label cache and the files its
    key covers; what reading left out, by name."""

    labels: list[str | None]
    given: list
    coco_json: Path | None
    image_ids: np.ndarray | None
    category_ids: list[int] | None
    named: bool
    usual_cache: Path
    key_files: list[str]
    noted: dict[str, int] = dataclasses.field(default_factory=dict)
    details: list[str] = dataclasses.field(default_factory=list)


def _protect(config: DataConfig, split: str, images: list[str]) -> None:
    """Register what the split reads as the command's sources (atomic_file): the data yaml, its label file, its
    folders and lists, the folder of each image, and (for .txt labels) the folder of each label file, read whole."""
    atomic_file.protect([config.source], "the data yaml")
    annotated = [path for path in (getattr(config.annotations.get(split), "path", None), config.json_files.get(split))
                 if path is not None]
    atomic_file.protect(annotated, f"the '{split}' split's annotations", trees=True)
    folders = {os.path.dirname(image) for image in images}
    atomic_file.protect([*config.splits[split], *folders], f"the '{split}' split's images", trees=True)
    if not any(map(os.path.exists, annotated)):  # .txt labels: a missing *_json is read so too
        labels = {os.path.dirname(label_path_for(os.path.join(folder, "image.jpg"))) for folder in folders}
        atomic_file.protect(sorted(labels - folders), f"the '{split}' split's labels", trees=True)


def label_sources(config: DataConfig, split: str, images: list[str], storage: Storage) -> LabelSources:
    """`split`'s labels: its label file's (data/annotations; a *_json is a COCO label file), fetched first from a
    bucket, or the .txt files beside the images; all it reads registered as the command's sources."""
    _protect(config, split, images)
    annotated, json_file = config.annotations.get(split), config.json_files.get(split)
    for path in (annotated.path if annotated else None, json_file):
        if path is not None and storage.holds(path):
            storage.fetch_tree(path)
    if json_file is not None and not json_file.is_file():  # coco128.zip, say, has no COCO json: its txt labels score
        LOGGER.warning("%s: %s_json names %s, which does not exist: the txt labels are read instead", config.source,
                       split, json_file)
    elif json_file is not None:
        annotated = AnnotationSource(path=json_file, images=config.splits[split][0], format="coco")
    if annotated is None:
        labels = list(map(label_path_for, images))  # no comprehension: one stay here (architecture.md)
        label_folder = Path(labels[0]).parent
        return LabelSources(labels, [None] * len(images), None, None, None, False,
                            label_folder.with_name(label_folder.name + CACHE_SUFFIX), images + labels)
    found = read_split_labels(annotated, config.names, images)
    return LabelSources([None] * len(images), found.given, found.coco_json, found.image_ids, found.category_ids, True,
                        annotated.path.with_name(f"{annotated.path.name}.{split}{CACHE_SUFFIX}"),
                        [*images, *found.files], found.counts, found.details)
