"""A synthetic set of large images with small objects, for tiled training and sliced inference (scripts/
tiles_side_by_side.sh): canvases of 2048-4096 px of textured ground, 8-32 px circles, squares and triangles on it.

Usage: python scripts/make_tiles_dataset.py OUT [--train 8] [--val 4] [--sides 2048 4096] [--objects 20 40]
                                                [--object-sides 8 32] [--seed 0]

Writes OUT/images/{train,val}/<name>.jpg, OUT/labels/{train,val}/<name>.txt and OUT/data.yaml (circle, square,
triangle). Objects never overlap; each is a flat colour far from the ground's. Deterministic: image i of a split
draws from a generator seeded by (seed, split, i).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cv2
import numpy as np
import yaml

NAMES = ["circle", "square", "triangle"]
QUALITY = 95
SPLITS = ("train", "val")


def ground(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Earth-toned ground: smooth blotches of a few tens of pixels and fine noise, (h, w, 3) uint8 BGR."""
    coarse = rng.uniform(60, 140, (max(2, height // 64), max(2, width // 64), 3)).astype(np.float32)
    coarse *= np.array([0.8, 1.0, 0.9], np.float32)  # a little green
    image = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
    image += rng.normal(0, 8, (height, width, 1)).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def draw(image: np.ndarray, shape: int, box: tuple[int, int, int, int], colour: tuple[int, int, int]) -> None:
    """Shape `shape` (an index of NAMES) filling box (x1, y1, x2, y2), in place."""
    x1, y1, x2, y2 = box
    if shape == 0:
        cv2.ellipse(image, (((x1 + x2) / 2, (y1 + y2) / 2), (x2 - x1, y2 - y1), 0), colour, -1, cv2.LINE_AA)
    elif shape == 1:
        cv2.rectangle(image, (x1, y1), (x2 - 1, y2 - 1), colour, -1)
    else:
        points = np.array([[(x1 + x2) // 2, y1], [x2 - 1, y2 - 1], [x1, y2 - 1]], np.int32)
        cv2.fillPoly(image, [points], colour, cv2.LINE_AA)


def make_image(rng: np.random.Generator, sides: tuple[int, int], objects: tuple[int, int],
               object_sides: tuple[int, int]) -> tuple[np.ndarray, list[str]]:
    """One canvas and its YOLO label lines."""
    height, width = (int(rng.integers(sides[0], sides[1] + 1)) // 32 * 32 for _ in range(2))
    image, lines, taken = ground(rng, height, width), [], []
    for _ in range(int(rng.integers(objects[0], objects[1] + 1))):
        for _attempt in range(20):  # a free place; a crowded canvas keeps fewer objects
            side_w, side_h = (int(rng.integers(object_sides[0], object_sides[1] + 1)) for _ in range(2))
            x1, y1 = int(rng.integers(0, width - side_w)), int(rng.integers(0, height - side_h))
            box = (x1, y1, x1 + side_w, y1 + side_h)
            if all(box[2] + 4 < other[0] or other[2] + 4 < box[0] or box[3] + 4 < other[1] or other[3] + 4 < box[1]
                   for other in taken):
                break
        else:
            continue
        shape = int(rng.integers(len(NAMES)))
        colour = tuple(int(value) for value in rng.choice([30, 220], 3))  # saturated: far from the ground's tones
        draw(image, shape, box, colour)
        taken.append(box)
        lines.append(f"{shape} {(box[0] + box[2]) / 2 / width:.6f} {(box[1] + box[3]) / 2 / height:.6f} "
                     f"{side_w / width:.6f} {side_h / height:.6f}")
    return image, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=8)
    parser.add_argument("--val", type=int, default=4)
    parser.add_argument("--sides", type=int, nargs=2, default=(2048, 4096))
    parser.add_argument("--objects", type=int, nargs=2, default=(20, 40))
    parser.add_argument("--object-sides", type=int, nargs=2, default=(8, 32))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for split_index, split in enumerate(SPLITS):
        for folder in ("images", "labels"):
            (args.out / folder / split).mkdir(parents=True, exist_ok=True)
        for index in range(getattr(args, split)):
            rng = np.random.default_rng([args.seed, split_index, index])
            image, lines = make_image(rng, tuple(args.sides), tuple(args.objects), tuple(args.object_sides))
            cv2.imwrite(str(args.out / "images" / split / f"{split}{index:04d}.jpg"), image,
                        [cv2.IMWRITE_JPEG_QUALITY, QUALITY])
            (args.out / "labels" / split / f"{split}{index:04d}.txt").write_text("".join(f"{line}\n" for line in lines))
    (args.out / "data.yaml").write_text(yaml.safe_dump({"path": ".", "train": "images/train",
                                                        "val": "images/val", "names": NAMES}))
    print(f"{args.out}: {args.train} train and {args.val} val images of {args.sides[0]}-{args.sides[1]} px")
    return 0


if __name__ == "__main__":
    sys.exit(main())
