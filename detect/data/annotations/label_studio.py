"""A Label Studio JSON export: a list of tasks, each with its image reference and annotations whose
`rectanglelabels` results give x, y, width, height in percent of the image (rotation in degrees about the top-left
corner). An uploaded file is stored as `/data/upload/<project>/<8 hex>-<name>`: it matches the image `<name>`."""

from __future__ import annotations

import math
import re
from pathlib import Path, PurePosixPath
from urllib.parse import parse_qs, unquote, urlsplit

from detect.data.annotations.json_file import read_json
from detect.data.annotations.parsed import Collector, ParsedLabels
from detect.errors import UserError

UPLOAD_PREFIX = re.compile(r"^[0-9a-f]{8}-(.+)$")  # Label Studio's uploads: a uuid's first 8 hex digits, a hyphen


def image_names(reference: str) -> tuple[str, ...]:
    """The file names a task's image reference may stand for: its own, then without the upload prefix. Local files
    served by Label Studio (`/data/local-files/?d=folder/x.jpg`) give the file of their `d` parameter."""
    parts = urlsplit(reference)
    path = parse_qs(parts.query).get("d", [parts.path])[0]
    name = PurePosixPath(unquote(path).replace("\\", "/")).name
    upload = UPLOAD_PREFIX.match(name)
    return (name, upload.group(1)) if upload else (name,)


def _reference(task: dict) -> str:
    data = task["data"]
    if isinstance(data.get("image"), str):
        return data["image"]
    texts = [value for value in data.values() if isinstance(value, str)]
    if len(texts) != 1:
        raise KeyError("data.image")
    return texts[0]


def read_label_studio(path: Path) -> ParsedLabels:
    """Every rectangle of the first annotation of each task (cancelled ones left out); class names sorted."""
    tasks = read_json(path, "a Label Studio JSON export")
    found = Collector([path])
    try:
        if not isinstance(tasks, list):
            raise TypeError("the file holds no list of tasks")
        for task in tasks:
            _read_task(task, found, path)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise UserError(f"{path}: not a Label Studio JSON export ({type(error).__name__}: {error})") from None
    return found.result(sort_names=True)


def _read_task(task: dict, found: Collector, path: Path) -> None:
    reference = _reference(task)  # a JSON-MIN export's rows have no "data": refused here, not read as unlabelled
    annotations = [item for item in task.get("annotations", []) if not item.get("was_cancelled")]
    if not annotations:
        return  # not labelled yet: its image stays without labels
    if len(annotations) > 1:
        found.left_out("task with several annotations: the first read",
                       f"{path}: task {task.get('id')} has {len(annotations)} annotations, the first is read")
    image = found.image(*image_names(reference))
    for result in annotations[0]["result"]:
        if result.get("type") != "rectanglelabels":
            found.left_out(f"{result.get('type')} result left out",
                           f"{path}: task {task.get('id')}: a {result.get('type')} result is not a box, left out")
            continue
        value = result["value"]
        left, top = float(value["x"]) / 100, float(value["y"]) / 100
        width, height = float(value["width"]) / 100, float(value["height"]) / 100
        corners = (left, top, left + width, top + height)
        if float(value.get("rotation", 0)) % 360:
            corners = _rotated_extent(left, top, width, height, float(value["rotation"]), result)
            found.left_out("rotated box: its enclosing box read", f"{path}: task {task.get('id')}: a box rotated by "
                           f"{value['rotation']} degrees, its enclosing upright box read")
        for name in value["rectanglelabels"][:1]:
            found.box(image, str(name), corners)


def _rotated_extent(left: float, top: float, width: float, height: float, degrees: float,
                    result: dict) -> tuple[float, float, float, float]:
    """The upright box around a rectangle turned clockwise by `degrees` about its top-left corner (in pixels, as the
    image's aspect ratio matters; fractions of the image in and out)."""
    image_width, image_height = float(result["original_width"]), float(result["original_height"])
    cos, sin = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    xs, ys = [], []
    for dx, dy in ((0, 0), (width * image_width, 0), (0, height * image_height),
                   (width * image_width, height * image_height)):
        xs.append(left + (dx * cos - dy * sin) / image_width)
        ys.append(top + (dx * sin + dy * cos) / image_height)
    return min(xs), min(ys), max(xs), max(ys)
