"""A COCO-size synthetic YOLO dataset for the scale benchmark: small JPEGs, txt labels with COCO's statistics.

Usage: python scripts/make_large_dataset.py OUT --images 118287 [--val-images 5000] [--workers 2] [--seed 0]

Writes OUT/images/{train,val}/<12-digit id>.jpg, OUT/labels/{train,val}/<id>.txt and OUT/data.yaml (COCO's 80
names). Statistics follow COCO train2017: 7.3 boxes per image, 1% background images (no label file), classes
skewed as COCO's (person about a quarter of the boxes), box sizes from small to large, and a few broken files
(0.05% zero-byte or cut-short JPEGs, 0.05% label files with a bad row) that the label check names and counts.
Deterministic: image i draws from a generator seeded by (seed, i), whatever the number of workers.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import yaml

# COCO train2017: 860,001 boxes on 118,287 images (7.3 per image), 1,021 images without a box (0.9%).
MEAN_BOXES = 7.3
BACKGROUND = 0.01
BROKEN_IMAGE = 0.0005
BROKEN_LABEL = 0.0005
SIDES = (64, 160)  # pixels: small, so 118k images stay a few hundred MB
QUALITY = 75
CHUNK = 500  # images per task of the process pool

NAMES = [name.replace("_", " ") for name in ["person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic_light", "fire_hydrant", "stop_sign", "parking_meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports_ball", "kite", "baseball_bat", "baseball_glove", "skateboard", "surfboard", "tennis_racket", "bottle", "wine_glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange", "broccoli", "carrot", "hot_dog", "pizza", "donut", "cake", "chair", "couch", "potted_plant", "bed", "dining_table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell_phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors", "teddy_bear", "hair_drier", "toothbrush"]]
# person holds 30% of COCO's boxes; the others fall off roughly as 1/rank (car 5%, chair 4.5%, ... toaster 0.02%)
CLASS_WEIGHTS = np.array([0.30 / 0.70 * sum(1 / rank for rank in range(1, 80))] + [1 / rank for rank in range(1, 80)])
CLASS_WEIGHTS /= CLASS_WEIGHTS.sum()


def sample_rows(rng: np.random.Generator) -> np.ndarray:
    """(n, 5) rows [class, cx, cy, w, h] normalised: n ~ Poisson(MEAN_BOXES) >= 1, sides log-uniform 2%-90%."""
    count = max(1, int(rng.poisson(MEAN_BOXES)))
    classes = rng.choice(len(NAMES), size=count, p=CLASS_WEIGHTS)
    sides = np.exp(rng.uniform(np.log(0.02), np.log(0.9), size=(count, 1))) * rng.uniform(0.5, 1.5, size=(count, 2))
    sides = np.clip(sides, 0.01, 1.0)
    centres = rng.uniform(sides / 2, 1 - sides / 2)
    return np.concatenate([classes[:, None], centres, sides], axis=1)


def draw(rng: np.random.Generator, width: int, height: int, rows: np.ndarray) -> np.ndarray:
    """(h, w, 3) uint8: a noisy background with each box filled in its class's colour."""
    image = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    image = cv2.resize(image, (width, height), interpolation=cv2.INTER_LINEAR)
    for cls, cx, cy, w, h in rows:
        colour = [int(channel) for channel in np.random.default_rng(int(cls)).integers(0, 256, 3)]
        x1, y1 = int((cx - w / 2) * width), int((cy - h / 2) * height)
        x2, y2 = int((cx + w / 2) * width), int((cy + h / 2) * height)
        cv2.rectangle(image, (x1, y1), (x2, y2), colour, thickness=-1)
    return image


def write_image(root: Path, split: str, index: int, seed: int) -> None:
    """Image `index` of `split` and its label file (or none, for a background image)."""
    rng = np.random.default_rng([seed, index, split == "val"])
    name = f"{index + 1:012d}"
    width, height = (int(side) for side in rng.integers(SIDES[0], SIDES[1] + 1, size=2))
    background = rng.random() < BACKGROUND
    rows = np.zeros((0, 5)) if background else sample_rows(rng)
    data = cv2.imencode(".jpg", draw(rng, width, height, rows), [cv2.IMWRITE_JPEG_QUALITY, QUALITY])[1].tobytes()
    broken = rng.random()
    if broken < BROKEN_IMAGE / 2:
        data = b""  # zero-byte
    elif broken < BROKEN_IMAGE:
        data = data[:200]  # cut short: header only, not decodable
    (root / "images" / split / f"{name}.jpg").write_bytes(data)
    if background:
        return
    lines = [f"{int(cls)} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}" for cls, cx, cy, w, h in rows]
    if rng.random() < BROKEN_LABEL:
        lines[0] = "0 0.5 0.5 0.2" if rng.random() < 0.5 else f"{len(NAMES)} 0.5 0.5 0.2 0.2"  # columns / class
    (root / "labels" / split / f"{name}.txt").write_text("\n".join(lines) + "\n")


def write_chunk(root: Path, split: str, start: int, stop: int, seed: int) -> int:
    """Images start..stop-1 of `split`; returns how many."""
    for index in range(start, stop):
        write_image(root, split, index, seed)
    return stop - start


def make_dataset(root: Path, images: int, val_images: int, workers: int, seed: int = 0) -> Path:
    """Write the dataset under `root` and return its data yaml."""
    tasks = []
    for split, count in (("train", images), ("val", val_images)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        tasks += [(split, start, min(start + CHUNK, count)) for start in range(0, count, CHUNK)]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(write_chunk, *zip(*[(root, split, start, stop, seed) for split, start, stop in tasks])))
    else:
        for split, start, stop in tasks:
            write_chunk(root, split, start, stop, seed)
    data_yaml = root / "data.yaml"
    data_yaml.write_text(yaml.safe_dump({"path": str(root.resolve()), "train": "images/train", "val": "images/val",
                                         "names": NAMES}, sort_keys=False))
    return data_yaml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="dataset folder (created)")
    parser.add_argument("--images", type=int, default=118287, help="training images (COCO train2017: 118287)")
    parser.add_argument("--val-images", type=int, default=5000, help="validation images (COCO val2017: 5000)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.images < 1 or args.val_images < 0:
        print("error: --images must be >= 1 and --val-images >= 0", file=sys.stderr)
        return 2
    start = time.perf_counter()
    data_yaml = make_dataset(args.out, args.images, args.val_images, args.workers, args.seed)
    print(f"{data_yaml}: {args.images} train + {args.val_images} val images in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
