"""A folder of Pascal VOC .xml files, one per image: 1-based pixel boxes, `difficult` objects as crowd.

VOC's corners are 1-based pixel indices, both ends inside the box (the VOC devkit; detectron2's pascal_voc.py reads
them the same way): the box covers x from xmin - 1 to xmax in the 0-based continuous frame the other formats use, so
xmin=1, xmax=W is the whole width. (yolov5's VOC.yaml converter moves both ends by -1: a box one pixel narrower.)
A difficult object is left out of training, as yolov5's converter does, and kept in the ground truth as a crowd
region, which no detection is counted against, as VOC's own evaluation ignores difficult objects."""

from __future__ import annotations

from pathlib import Path

from detect.data.annotations.parsed import Collector, ParsedLabels
from detect.data.annotations.safe_xml import read_xml
from detect.errors import UserError

CORNERS = ("xmin", "ymin", "xmax", "ymax")


def read_voc(folder: Path) -> ParsedLabels:
    """Every .xml of `folder` (not its subfolders), in name order; class names sorted."""
    files = sorted(path for path in folder.glob("*.xml") if path.is_file())
    if not files:
        raise UserError(f"{folder}: no Pascal VOC .xml files there (annotations: names the folder of .xml files)")
    found = Collector(files)
    for path in files:
        _read_file(path, found)
    return found.result(sort_names=True)


def _number(element, tag: str, path: Path) -> float:
    text = element.findtext(tag)
    try:
        return float(text)
    except (TypeError, ValueError):
        raise UserError(f"{path}: not a Pascal VOC annotation (<{tag}> is {text!r}, not a number)") from None


def _read_file(path: Path, found: Collector) -> None:
    root = read_xml(path)
    if root.tag != "annotation":
        raise UserError(f"{path}: not a Pascal VOC annotation (the root element is <{root.tag}>, not <annotation>)")
    size = root.find("size")
    width, height = (0.0, 0.0) if size is None else (_number(size, "width", path), _number(size, "height", path))
    if width <= 0 or height <= 0:
        found.left_out("VOC file without an image size", f"{path}: no <size> width and height, its image is unlabelled")
        return
    file_name = (root.findtext("filename") or "").strip()
    image = found.image(Path(file_name).name, path.stem, file=path)  # the stem: yolov5's converter finds the image by it
    for element in root.iter("object"):
        name = (element.findtext("name") or "").strip()
        box = element.find("bndbox")
        if box is None:
            found.left_out("VOC object without <bndbox>", f"{path}: object {name!r} has no <bndbox>, left out")
            continue
        xmin, ymin, xmax, ymax = (_number(box, tag, path) for tag in CORNERS)
        difficult = (element.findtext("difficult") or "0").strip() in ("1", "true")
        found.box(image, name, ((xmin - 1) / width, (ymin - 1) / height, xmax / width, ymax / height), difficult)
