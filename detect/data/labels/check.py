"""Check one image and its label rows: every problem gets a name, a count and a line in the details file; the checks
of a split's images, flat (CheckedImages)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from detect.config import Bound
from detect.data.images.load import decode_truncated_jpeg
from detect.data.images.pixels import DEFAULT_MAX_PIXELS, ImageTooLarge, check_pixels, open_header
from detect.data.storage.files import file_problem
from detect.errors import short_repr
from detect.ops.boxes import clip_boxes, xywh_to_xyxy, xyxy_to_xywh

# Problem names (the summary table and the tests use these exact strings).
ZERO_BYTE = "zero-byte image"
UNREADABLE = "unreadable image"
TRUNCATED = "truncated image"
TOO_SMALL = "image too small"
TOO_LARGE = "image too large"
COLUMNS = "wrong column count"
NON_NUMERIC = "non-numeric value"
NON_FINITE = "non-finite value"
CLASS_RANGE = "class id out of range"
OUTSIDE = "coordinates outside [0,1]"
ZERO_AREA = "zero-area box"
DUPLICATE = "duplicate rows"
MISSING_LABELS = "missing label file"
UNREADABLE_LABELS = "unreadable label file"
TRUNCATED_USED = "truncated JPEG, decodable, used"
TOO_MANY_BOXES = "too many boxes"

MIN_SIDE = 10  # pixels; yolov5 rejects images with a side under 10
# Normalised coordinates this far outside [0, 1] are rounding by a labelling tool and are clipped; beyond is an error.
TOLERANCE = 0.01
EXIF_ORIENTATION = 274
# Boxes an image's labels may hold: COCO's busiest image has 93, SKU-110K's and DOTA's hundreds to a few thousand; a
# label file of 2 million boxes on one image (176 MB of COCO json) is refused here instead of stalling the loss.
DEFAULT_MAX_BOXES = 10_000
MAX_BOXES = Bound("an integer >= 1", lambda value: value >= 1)
MAX_BOXES_HELP = "an image whose labels hold more boxes is skipped by name (raise it for denser data)"


@dataclasses.dataclass(frozen=True)
class ImageBounds:
    """What one image of a split may bring: the pixels its header claims (--max-pixels), the boxes its labels hold
    (--max-boxes). More is a named skip."""

    max_pixels: int = DEFAULT_MAX_PIXELS
    max_boxes: int = DEFAULT_MAX_BOXES


DEFAULT_BOUNDS = ImageBounds()


@dataclasses.dataclass
class CheckResult:
    """What the check found for one image: size, kept label rows (n, 5) cls cx cy w h, crowd flags, problems."""

    path: str
    width: int = 0
    height: int = 0
    rows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 5), np.float32))
    crowd: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, bool))
    skipped: str | None = None
    fixes: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    details: list[str] = dataclasses.field(default_factory=list)
    background: bool = False


def _jpeg_complete(path: Path, result: CheckResult) -> bool:
    """False (problem recorded) for a JPEG that is cut short and cannot be decoded; a decodable one gets a note."""
    if path.stat().st_size < 4:
        return True  # too short to be a JPEG: PIL names it unreadable
    with open(path, "rb") as handle:
        start = handle.read(2)
        handle.seek(-2, 2)
        end = handle.read(2)
    if start != b"\xff\xd8" or end == b"\xff\xd9":
        return True
    if decode_truncated_jpeg(path.read_bytes()) is None:
        result.skipped = TRUNCATED
        return False
    result.notes.append(TRUNCATED_USED)
    return True


def _pixels_within(path: Path, max_pixels: int, result: CheckResult) -> bool:
    """False (problem recorded) for an image whose header claims more than `max_pixels`: checked before anything
    decodes it. A header that cannot be read passes, for the checks after this one to name."""
    try:
        check_pixels(path, max_pixels)
    except ImageTooLarge as error:
        result.skipped, result.details = TOO_LARGE, [f"{path}: {TOO_LARGE} ({error})"]
        return False
    except Exception:  # noqa: BLE001 (PIL raises many types for bad files)
        return True  # a header that cannot be read: the checks below name the problem
    return True


def _image_size(path: Path, result: CheckResult, max_pixels: int) -> tuple[int, int] | None:
    """(width, height) after EXIF rotation (as cv2.imread returns it), or None with the problem recorded."""
    if path.stat().st_size == 0:
        result.skipped = ZERO_BYTE
        return None
    if not _pixels_within(path, max_pixels, result) or not _jpeg_complete(path, result):
        return None
    try:
        with open_header(path) as image:
            width, height = image.size
            # a JPEG's EXIF is in its header, read by open: one open serves verify too (a PNG's is not: open again)
            jpeg = image.format in ("JPEG", "MPO")
            orientation = image.getexif().get(EXIF_ORIENTATION, 1) if jpeg else None
            if not result.notes:  # PIL's verify rejects a truncated JPEG that we chose to use
                image.verify()
        if orientation is None:
            with open_header(path) as image:
                orientation = image.getexif().get(EXIF_ORIENTATION, 1)
    except Exception as error:  # noqa: BLE001 (PIL raises many types for bad files)
        result.skipped, result.details = UNREADABLE, [f"{path}: {UNREADABLE} ({error})"]
        return None
    if orientation in (5, 6, 7, 8):  # rotated by 90 degrees
        width, height = height, width
    if width < MIN_SIDE or height < MIN_SIDE:
        result.skipped, result.details = TOO_SMALL, [f"{path}: {TOO_SMALL} ({width}x{height})"]
        return None
    return width, height


def parse_label_text(text: str, num_classes: int) -> tuple[np.ndarray | None, str | None, str]:
    """Label file text -> ((n, 5) float32 rows, None, "") or (None, problem, detail). Polygons become boxes."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 5 and (len(fields) < 7 or len(fields) % 2 == 0):
            return None, COLUMNS, f"line {number}: {len(fields)} columns"
        try:
            values = [float(field) for field in fields]
        except ValueError:
            return None, NON_NUMERIC, f"line {number}: {short_repr(line.strip())}"
        if len(values) > 5:  # a segment polygon: its bounding box (yolov5 accepts these)
            xs, ys = np.array(values[1::2]), np.array(values[2::2])
            values = [values[0], *xyxy_to_xywh(np.array([xs.min(), ys.min(), xs.max(), ys.max()])).tolist()]
        rows.append(values)
    return np.array(rows, np.float32).reshape(-1, 5), None, ""


def validate_rows(rows: np.ndarray, crowd: np.ndarray, num_classes: int, result: CheckResult) -> None:
    """Check (n, 5) rows; fills result.rows/crowd, or result.skipped. Clips within TOLERANCE, drops bad boxes."""
    finite = np.isfinite(rows).all(axis=1)
    if not finite.all():  # float() reads "nan" and "inf": name them, before they pass as some other problem
        result.skipped = NON_FINITE
        result.details.append(f"row {int(np.argmin(finite)) + 1}")
        return
    classes = rows[:, 0]
    bad_class = (classes != np.round(classes)) | (classes < 0) | (classes >= num_classes)
    if bad_class.any():
        result.skipped = CLASS_RANGE
        result.details.append(f"class {classes[bad_class][0]:g} with {num_classes} classes")
        return
    corners = xywh_to_xyxy(rows[:, 1:5])
    if ((corners < -TOLERANCE) | (corners > 1 + TOLERANCE)).any() or (rows[:, 3:5] < 0).any():
        result.skipped = OUTSIDE
        return
    boxes = xyxy_to_xywh(clip_boxes(corners, 1.0, 1.0))
    rows = np.concatenate([classes[:, None], boxes], axis=1).astype(np.float32)
    positive = (rows[:, 3] > 0) & (rows[:, 4] > 0)
    if not positive.all():
        result.fixes.append(ZERO_AREA)
        result.details.append(f"{ZERO_AREA}: {int((~positive).sum())} rows dropped")
        rows, crowd = rows[positive], crowd[positive]
    _, first = np.unique(np.concatenate([rows, crowd[:, None]], axis=1), axis=0, return_index=True)
    if len(first) < len(rows):
        result.fixes.append(DUPLICATE)
        result.details.append(f"{DUPLICATE}: {len(rows) - len(first)} rows dropped")
        first.sort()
        rows, crowd = rows[first], crowd[first]
    result.rows, result.crowd = rows, crowd


def _unopenable(image: str, label_file: str | None, result: CheckResult) -> bool:
    """True (problem recorded) when the image, or a label file that is there, is not a regular file we may read
    (files.file_problem): missing, a broken or looping link, a FIFO named x.jpg or x.txt, which would block the
    check for ever."""
    problem = file_problem(image)
    if problem is not None:
        result.skipped, result.details = problem, [f"{image}: {problem}"]
        return True
    problem = file_problem(label_file) if label_file is not None and os.path.lexists(label_file) else None
    if problem is not None:
        result.skipped, result.details = UNREADABLE_LABELS, [f"{label_file}: {problem}"]
        return True
    return False


def _too_many_boxes(count: int, max_boxes: int, where: str, result: CheckResult) -> bool:
    """True (problem recorded) for labels of more than `max_boxes` boxes."""
    if count <= max_boxes:
        return False
    result.skipped = TOO_MANY_BOXES
    result.details = [(f"{where}: {TOO_MANY_BOXES} ({count:,}, more than the {max_boxes:,} an image may hold: "
                      "--max-boxes)")]
    return True


def check_image(
    image: str, label_file: str | None, num_classes: int, given: tuple[np.ndarray, np.ndarray] | None = None,
    bounds: ImageBounds = DEFAULT_BOUNDS,
) -> CheckResult:
    """Check an image and its labels (within `bounds`): a YOLO txt file, or `given` (rows, crowd) from a label file
    of another format."""
    path, result = Path(image), CheckResult(path=image)
    if _unopenable(image, label_file, result):
        return result
    size = _image_size(path, result, bounds.max_pixels)
    if size is None:
        return result
    result.width, result.height = size
    if given is not None:
        rows, crowd = given
        if _too_many_boxes(len(rows), bounds.max_boxes, image, result):
            return result
    elif label_file is None or not os.path.lexists(label_file):
        result.background, result.notes = True, result.notes + [MISSING_LABELS]
        return result
    else:
        try:
            text = Path(label_file).read_text(errors="replace")
        except OSError as error:
            result.skipped, result.details = UNREADABLE_LABELS, [f"{label_file}: {error.strerror or error}"]
            return result
        if text.count("\n") > bounds.max_boxes and _too_many_boxes(
                sum(1 for line in text.splitlines() if line.strip()), bounds.max_boxes, label_file, result):
            return result  # counted before parsing: 2 million rows take seconds to parse
        parsed, problem, detail = parse_label_text(text, num_classes)
        if parsed is None:
            result.skipped, result.details = problem, [f"{label_file}: {detail}"]
            return result
        rows, crowd = parsed, np.zeros(len(parsed), bool)
    validate_rows(rows, crowd, num_classes, result)
    if result.skipped is not None:
        result.details = [f"{label_file or image}: {result.skipped} {' '.join(result.details)}".rstrip()]
    else:
        result.details = [f"{label_file or image}: {detail}" for detail in result.details]
        result.background = len(result.rows) == 0
    return result


@dataclasses.dataclass(frozen=True, eq=False)
class CheckedImages:
    """N checked images in listing order: widths, heights (N,) int32, offsets (N + 1,) int64 into rows (M, 5)
    float32 and crowd (M,) bool, background (N,) bool, and one dict per image with anything to report
    ({"index", "skipped", "fixes", "notes", "details"}; most images have none, so this list stays short)."""

    widths: np.ndarray
    heights: np.ndarray
    offsets: np.ndarray
    rows: np.ndarray
    crowd: np.ndarray
    background: np.ndarray
    problems: list[dict]

    @classmethod
    def from_results(cls, results: Sequence[CheckResult]) -> CheckedImages:
        """Flatten per-image results (a skipped image keeps no rows)."""
        kept = [result.rows if result.skipped is None else result.rows[:0] for result in results]
        offsets = np.zeros(len(results) + 1, np.int64)
        np.cumsum([len(rows) for rows in kept], out=offsets[1:])
        crowd = [result.crowd[:len(rows)] for result, rows in zip(results, kept)]
        problems = [{"index": index, "skipped": result.skipped, "fixes": result.fixes, "notes": result.notes,
                     "details": result.details} for index, result in enumerate(results)
                    if result.skipped or result.fixes or result.notes or result.details]
        return cls(widths=np.array([result.width for result in results], np.int32),
                   heights=np.array([result.height for result in results], np.int32), offsets=offsets,
                   rows=np.concatenate(kept or [np.zeros((0, 5), np.float32)]).astype(np.float32).reshape(-1, 5),
                   crowd=np.concatenate(crowd or [np.zeros(0, bool)]).astype(bool),
                   background=np.array([result.background for result in results], bool), problems=problems)

    @property
    def usable(self) -> np.ndarray:
        """(N,) bool: not skipped."""
        usable = np.ones(len(self.widths), bool)
        usable[[problem["index"] for problem in self.problems if problem["skipped"]]] = False
        return usable
