"""`python -m detect.data convert`: a dataset's checked labels written as yolov5's layout (images/ and labels/ folders
of .txt) or as a COCO json per split, with a data yaml that reads them.

A conversion never writes into, over or under its own sources: every split is read and every target named first,
then --out is refused in one line when it holds a source (the data yaml, an image, a label file or folder) or lies
inside one, when two images would be written to one name, or when it is a file or cannot be written; only then is
anything written."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import yaml

from detect import atomic_file
from detect.data.categories import yolo_category_ids
from detect.data.data_config import DataConfig
from detect.data.labels.check import DEFAULT_BOUNDS, ImageBounds
from detect.data.labels.split import LabelledSplit, load_split
from detect.data.records import label_path_for
from detect.data.storage.cache_places import folder_writable
from detect.errors import UserError
from detect.ops.boxes import xywhn_to_xyxy, xyxy_to_ltwh

LOGGER = logging.getLogger(__name__)
TARGETS = ("yolo", "coco")


def _relative_name(image: Path, sources: tuple[Path, ...]) -> Path:
    """An image's path under the split's folder that holds it (its subfolders kept), else its file name."""
    for source in sources:
        if source.is_dir() and image.is_relative_to(source):
            return image.relative_to(source)
    return Path(image.name)


def _yolo_targets(split: LabelledSplit, sources: tuple[Path, ...], out: Path, name: str) -> list[tuple[Path, Path]]:
    """(image, label) written for each record: out/images/<name>/<relative> and its .txt under out/labels/<name>/;
    two images that would share a name are one UserError."""
    targets, seen = [], {}
    for record in split.records:
        relative = _relative_name(Path(record.path), sources)
        image = out / "images" / name / relative
        if image in seen:
            raise UserError(f"--out {out}: {seen[image]} and {record.path} would both be written as {image}: give "
                            "the split one folder of images, or images of different names")
        seen[image] = record.path
        targets.append((image, (out / "labels" / name / relative).with_suffix(".txt")))
    return targets


def _write_yolo_split(split: LabelledSplit, targets: list[tuple[Path, Path]], copy: bool) -> None:
    """The images (links, or copies) and their .txt labels without crowd boxes (yolov5's .txt has no crowd flag; its
    converter leaves them out too). The writer replaces what an earlier conversion left (a link or a copy) and any
    link inside --out, and refuses a source (atomic_file)."""
    for record, (image, label) in zip(split.records, targets):
        if copy:
            atomic_file.copy_file(record.path, image)
        else:
            atomic_file.link_file(image, Path(record.path).resolve())
        classes, boxes = record.train_boxes
        atomic_file.write_text(label, "".join(f"{int(cls)} {' '.join(f'{value:.6f}' for value in box)}\n"
                                              for cls, box in zip(classes, boxes.tolist())))


def coco_dict(split: LabelledSplit) -> dict:
    """A COCO instances dict of the split's records (crowd boxes as iscrowd 1), category ids as the split's; each
    annotation has COCO's `segmentation` field, empty, as a box has no polygon."""
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
                                "iscrowd": int(bool(crowd)), "segmentation": []})
    categories = [{"id": int(category), "name": name} for category, name in zip(category_ids, split.names)]
    return {"images": images, "annotations": annotations, "categories": categories}


def _sources(config: DataConfig, splits: dict[str, LabelledSplit]) -> Iterable[Path]:
    """Every path a conversion reads: the data yaml, each split's folders, lists and label files, each image and
    its .txt label."""
    yield config.source
    for name, split in splits.items():
        yield from config.splits[name]
        if name in config.annotations:
            yield config.annotations[name].path
        if name in config.json_files:
            yield config.json_files[name]
        for path in split.records.paths:
            image = os.fsdecode(path)
            yield Path(image)
            if name not in config.annotations and name not in config.json_files:
                yield Path(label_path_for(image)).parent


def _identity(path: Path, known: dict[Path, tuple[int, int] | None]) -> tuple[int, int] | None:
    """(device, inode) of folder `path`, None where it is missing (remembered in `known`)."""
    if path not in known:
        try:
            info = os.stat(path)
            known[path] = (info.st_dev, info.st_ino)
        except OSError:
            known[path] = None
    return known[path]


def _refuse_overlap(out: Path, given: Path, sources: Iterable[Path]) -> None:
    """UserError when `out` (`given`, resolved) holds a source or lies inside one, links followed on both sides, and
    a folder known by its identity (device, inode) as well as its path: a second mount of the dataset holds it too."""
    known: dict[Path, tuple[int, int] | None] = {}
    out_id = _identity(out, known)
    for source in sources:
        real = Path(os.path.realpath(source))
        holds = real.is_relative_to(out) or out_id is not None and any(
            _identity(parent, known) == out_id for parent in (real, *real.parents))
        if holds or out.is_relative_to(real):
            where = "is" if real == out else "holds" if holds else "lies inside"
            named = given if given == out else f"{given} ({out})"
            raise UserError(f"--out {named}: {where} {source}, a source of the conversion, which it would overwrite; "
                            "choose a folder outside the dataset's images, labels and data yaml")


def _writable_out(out: Path) -> Path:
    """`out` resolved; UserError when it is a file, lies under a file or cannot be written."""
    out = Path(os.path.realpath(out))
    existing = next(folder for folder in (out, *out.parents) if os.path.lexists(folder))
    if not existing.is_dir():
        # a link that realpath could not follow leads back to itself
        kind = "a link that leads back to itself (a loop)" if existing.is_symlink() else "a file, not a folder"
        raise UserError(f"--out {out}: {'is' if existing == out else f'lies under {existing},'} {kind}")
    if not folder_writable(existing):
        raise UserError(f"--out {out}: {existing} cannot be written (no write permission)")
    return out


@atomic_file.command()
def convert(config: DataConfig, to: str, out: Path, copy: bool = False, cache_dir: str | None = None,
            bounds: ImageBounds = DEFAULT_BOUNDS) -> Path:
    """Write every split of `config` (checked within `bounds`) as `to` ("yolo" or "coco") under `out`; the data yaml
    written there."""
    given, out = out, _writable_out(out)
    splits = {name: load_split(config, name, cache_dir=cache_dir, bounds=bounds) for name in config.splits}
    sources = list(_sources(config, splits))
    _refuse_overlap(out, given, sources)
    atomic_file.protect(sources, "a source of the conversion", trees=True)
    targets = {name: _yolo_targets(split, config.splits[name], out, name) for name, split in splits.items()
               if to == "yolo"}
    spec: dict = {"path": str(out), "names": list(config.names)}
    try:
        atomic_file.output_folder(out, "--out")
        for name, split in splits.items():
            if to == "yolo":
                _write_yolo_split(split, targets[name], copy)
                spec[name] = f"images/{name}"
            else:
                listing = out / f"{name}.txt"
                atomic_file.write_text(listing, "".join(os.fsdecode(path) + "\n" for path in split.records.paths))
                atomic_file.write_text(out / f"{name}.json", json.dumps(coco_dict(split)))
                spec[name] = {"annotations": f"{name}.json", "images": listing.name, "format": "coco"}
        target = atomic_file.write_text(out / "data.yaml", yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    except OSError as error:
        raise UserError(f"--out {out}: cannot write {error.filename or out} ({error.strerror or error})") from None
    LOGGER.info("%s: %d splits written as %s", target, len(splits), to)
    return target
