"""A "CVAT for images 1.1" xml: <image name width height> elements holding <box label xtl ytl xbr ybr occluded
rotation>, in pixels of the 0-based continuous frame (0 is the image's left edge). Occluded boxes are boxes like any
other; shapes other than boxes are left out, counted."""

from __future__ import annotations

import math
from pathlib import Path, PurePosixPath

from detect.data.annotations.parsed import Collector, ParsedLabels
from detect.data.annotations.safe_xml import read_xml
from detect.errors import UserError

SHAPES = ("polygon", "polyline", "points", "ellipse", "cuboid", "mask", "skeleton", "tag")


def read_cvat(path: Path) -> ParsedLabels:
    """Every box; class names in the order of the file's <labels>, then any others in the order met."""
    root = read_xml(path)
    if root.tag != "annotations":
        raise UserError(f"{path}: not a CVAT for images 1.1 file (the root element is <{root.tag}>, not <annotations>)")
    if root.find("image") is None and root.find("track") is not None:
        raise UserError(f"{path}: a CVAT for video file (<track> elements): export the task as CVAT for images 1.1")
    meta = root.find("meta")
    labels = [] if meta is None else [label.findtext("name", "").strip() for label in meta.iter("label")]
    found = Collector([path], [name for name in dict.fromkeys(labels) if name])
    try:
        for element in root.iter("image"):
            _read_image(element, found, path)
    except (KeyError, ValueError) as error:
        raise UserError(f"{path}: not a CVAT for images 1.1 file ({type(error).__name__}: {error})") from None
    return found.result(sort_names=False)


def _read_image(element, found: Collector, path: Path) -> None:
    name = element.attrib["name"]
    width, height = float(element.attrib["width"]), float(element.attrib["height"])
    if width <= 0 or height <= 0:
        raise ValueError(f"image {name!r} has width or height <= 0")
    image = found.image(PurePosixPath(name.replace("\\", "/")).name)
    for shape in element:
        if shape.tag != "box":
            if shape.tag in SHAPES:
                found.left_out(f"CVAT {shape.tag} left out", f"{path}: image {name!r}: a {shape.tag} is not a box")
            continue
        corners = [float(shape.attrib[key]) for key in ("xtl", "ytl", "xbr", "ybr")]
        degrees = float(shape.attrib.get("rotation", 0))
        if degrees % 360:
            corners = _rotated_extent(corners, degrees)
            found.left_out("rotated box: its enclosing box read",
                           f"{path}: image {name!r}: a box rotated by {degrees:g} degrees, its enclosing box read")
        left, top, right, bottom = corners
        found.box(image, shape.attrib["label"], (left / width, top / height, right / width, bottom / height))


def _rotated_extent(corners: list[float], degrees: float) -> list[float]:
    """The upright box around a box turned clockwise by `degrees` about its centre (CVAT's rotation), in pixels."""
    left, top, right, bottom = corners
    centre_x, centre_y = (left + right) / 2, (top + bottom) / 2
    half_width = ((right - left) * abs(math.cos(math.radians(degrees))) +
                  (bottom - top) * abs(math.sin(math.radians(degrees)))) / 2
    half_height = ((right - left) * abs(math.sin(math.radians(degrees))) +
                   (bottom - top) * abs(math.cos(math.radians(degrees)))) / 2
    return [centre_x - half_width, centre_y - half_height, centre_x + half_width, centre_y + half_height]
