"""Tracking sequences with known identities, made from coco128's photos and labels (scripts/track_benchmark.py):

- `crossing`: objects cut from coco128 (each a labelled box) moving over a photo, entering and leaving the frame,
  crossing and hiding behind each other (a fixed depth order; an object less than MIN_VISIBLE visible has no truth row
  for that frame, so hiding costs no false negatives, only the risk of a new id after it); the photo's own labelled
  objects stand still behind them, with ids of their own.
- `pan`: a camera panning and zooming over a 3000 x 3000 mosaic of coco128 photos (6 x 6 of 500 px by default), whose
  labels move with it; the frames are large (1920 x 1080, or 4K) and most objects small in them.

Each sequence is a folder of JPEG frames and `gt.txt`, MOTChallenge ground truth (frame, id, x, y, w, h, 1, 1, 1: every
row scored, as a pedestrian)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import cv2
import numpy as np

MIN_VISIBLE = 0.4  # of an object's box that must be unhidden for it to count in a frame
MIN_SIDE = 8  # px: a smaller box in a pan frame has no truth row (no detector finds it; it would only add misses)
MOSAIC = 3000  # px, the pan's mosaic: grid x grid photos
BACKGROUND_IDS = 1000  # a crossing's background photo's labelled objects: ids from here


@dataclasses.dataclass(frozen=True)
class Cutout:
    """A labelled object cut from a coco128 photo."""

    pixels: np.ndarray  # BGR, the label's box
    cls: int


def labelled_boxes(coco128: Path, stem: str, width: int, height: int) -> list[tuple[int, np.ndarray]]:
    """(class, [x1, y1, x2, y2] pixels) of a coco128 photo's labels, at a (width, height) size of the photo."""
    path = coco128 / "labels" / "train2017" / f"{stem}.txt"
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    boxes = []
    for cls, cx, cy, w, h in ((int(row[0]), *map(float, row[1:5])) for row in rows):
        boxes.append((cls, np.array([(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width,
                                     (cy + h / 2) * height], np.float32)))
    return boxes


def photos(coco128: Path) -> list[Path]:
    return sorted((coco128 / "images" / "train2017").glob("*.jpg"))


def cutouts(coco128: Path, count: int, rng: np.random.Generator) -> list[Cutout]:
    """`count` objects of at least 80 px a side and no more than 3:1, from photos chosen by `rng`."""
    found = []
    for path in rng.permutation(photos(coco128)):
        image = cv2.imread(str(path))
        for cls, box in labelled_boxes(coco128, path.stem, image.shape[1], image.shape[0]):
            x1, y1, x2, y2 = box.round().astype(int).tolist()
            if min(x2 - x1, y2 - y1) >= 80 and max(x2 - x1, y2 - y1) <= 3 * min(x2 - x1, y2 - y1):
                found.append(Cutout(image[max(y1, 0):y2, max(x1, 0):x2].copy(), cls))
                break  # one object a photo: different-looking objects
        if len(found) == count:
            return found
    raise SystemExit(f"{coco128}: fewer than {count} objects fit a crossing sequence")


def write_sequence(folder: Path, frames: list[np.ndarray], truth: list[tuple[int, int, np.ndarray]]) -> Path:
    """frames/000001.jpg, ... and gt.txt from (frame number, id, xyxy) rows."""
    (folder / "frames").mkdir(parents=True, exist_ok=True)
    for number, image in enumerate(frames, 1):
        cv2.imwrite(str(folder / "frames" / f"{number:06d}.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 95])
    lines = [f"{number},{track_id},{x1:.2f},{y1:.2f},{x2 - x1:.2f},{y2 - y1:.2f},1,1,1\n"
             for number, track_id, (x1, y1, x2, y2) in truth]
    (folder / "gt.txt").write_text("".join(lines))
    return folder


def crossing(coco128: Path, folder: Path, frames: int, seed: int, size: tuple[int, int] = (540, 960)) -> Path:
    """Objects crossing a photo (see the module's docstring): `frames` frames of `size` (h, w)."""
    rng = np.random.default_rng(seed)
    height, width = size
    photo = rng.choice(photos(coco128))
    background = cv2.resize(cv2.imread(str(photo)), (width, height))
    still = [(BACKGROUND_IDS + index, box.round().astype(int))  # the photo's own objects stand still, at the back
             for index, (_, box) in enumerate(labelled_boxes(coco128, photo.stem, width, height))]
    objects = []
    for index, cutout in enumerate(cutouts(coco128, 8, rng)):
        scale = rng.uniform(90, 170) / max(cutout.pixels.shape[:2])
        pixels = cv2.resize(cutout.pixels, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        speed = rng.uniform(4, 9) * (1 if index % 2 else -1)  # odd ones walk right, even ones left
        enters = 6 * index  # the frame at which it reaches the frame's edge
        start_x = (-pixels.shape[1] if speed > 0 else width) - speed * enters
        start = np.array([start_x, rng.uniform(0.05, 0.65) * height])
        objects.append((pixels, start, np.array([speed, rng.uniform(-1.0, 1.0)])))
    images, truth = [], []
    for number in range(1, frames + 1):
        image, placed = background.copy(), list(still)
        for track_id, (pixels, start, velocity) in enumerate(objects, 1):  # later objects in front
            x, y = (start + velocity * number).round().astype(int)
            h, w = pixels.shape[:2]
            left, top, right, bottom = max(x, 0), max(y, 0), min(x + w, width), min(y + h, height)
            if right <= left or bottom <= top:
                continue
            image[top:bottom, left:right] = pixels[top - y:bottom - y, left - x:right - x]
            placed.append((track_id, np.array([left, top, right, bottom])))
        images.append(image)
        truth += [(number, track_id, box.astype(np.float32)) for track_id, box in visible(placed, width, height)]
    return write_sequence(folder, images, truth)


def visible(placed: list[tuple[int, np.ndarray]], width: int, height: int) -> list[tuple[int, np.ndarray]]:
    """The placed boxes (back to front) of which at least MIN_VISIBLE is not covered by those in front."""
    kept = []
    for index, (track_id, box) in enumerate(placed):
        mask = np.zeros((height, width), bool)
        x1, y1, x2, y2 = box
        mask[y1:y2, x1:x2] = True
        area = mask.sum()
        for _, (fx1, fy1, fx2, fy2) in placed[index + 1:]:
            mask[fy1:fy2, fx1:fx2] = False
        if mask.sum() >= MIN_VISIBLE * area:
            kept.append((track_id, box))
    return kept


def mosaic(coco128: Path, grid: int) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
    """The 3000 x 3000 mosaic of the first grid x grid coco128 photos (each resized to 3000 / grid px) and its
    labels."""
    canvas, tile = np.zeros((MOSAIC, MOSAIC, 3), np.uint8), MOSAIC // grid
    labels = []
    for index, path in enumerate(photos(coco128)[:grid * grid]):
        top, left = (index // grid) * tile, (index % grid) * tile
        canvas[top:top + tile, left:left + tile] = cv2.resize(cv2.imread(str(path)), (tile, tile),
                                                              interpolation=cv2.INTER_AREA)
        for _, box in labelled_boxes(coco128, path.stem, tile, tile):
            labels.append((len(labels) + 1, box + np.array([left, top, left, top], np.float32)))
    return canvas, labels


def pan(coco128: Path, folder: Path, frames: int, size: tuple[int, int] = (1080, 1920), grid: int = 6) -> Path:
    """The camera over the mosaic (see the module's docstring): its view starts 2900 px wide centred at (1300, 1300)
    and, each frame, narrows by 15 px while its centre moves by (10, 9) px of the mosaic; frames of `size` (h, w)."""
    canvas, labels = mosaic(coco128, grid)
    height, width = size
    images, truth = [], []
    for number in range(1, frames + 1):
        view = 2900 - 15 * (number - 1)
        scale = width / view
        centre = np.array([1300 + 10 * (number - 1), 1300 + 9 * (number - 1)])
        shift = np.array([width / 2, height / 2]) - centre * scale
        matrix = np.array([[scale, 0, shift[0]], [0, scale, shift[1]]], np.float32)
        images.append(cv2.warpAffine(canvas, matrix, (width, height), flags=cv2.INTER_AREA))
        for track_id, box in labels:
            moved = box * scale + np.tile(shift, 2)
            clipped = np.clip(moved, 0, [width, height, width, height])
            sides = clipped[2:] - clipped[:2]
            inside = np.prod(np.maximum(sides, 0)) / np.prod(moved[2:] - moved[:2])
            if inside >= 0.5 and sides.min() >= MIN_SIDE:
                truth.append((number, track_id, clipped.astype(np.float32)))
    return write_sequence(folder, images, truth)
