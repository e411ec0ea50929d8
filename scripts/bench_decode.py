"""What decoding at reduced scale would save: CPU ms per source image of the training loader's load (full decode,
then the resize of the long side to --imgsz) against libjpeg's DCT-scaled decode (cv2.IMREAD_REDUCED_COLOR_2 or
_4, the largest the source allows, at least twice --imgsz) resized to the same shape. Rounds alternate in one
process; the mean absolute pixel difference says how far the reduced images are from yolov5's.

    python scripts/bench_decode.py --images ../datasets/coco128/images/train2017 --imgsz 320
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import cv2
import numpy as np

from detect.backend.cpu import cpu_description
from detect.data.images.load import load_resized, read_image, resize_to_imgsz, resized_shape

REDUCED_FLAGS = ((4, cv2.IMREAD_REDUCED_COLOR_4), (2, cv2.IMREAD_REDUCED_COLOR_2))


def reduced_load(path: Path, imgsz: int, shape: tuple[int, int]) -> np.ndarray:
    """The reduced decode of a source of `shape` (h, w), resized to the training load's shape (load_resized)."""
    flag = next((flag for factor, flag in REDUCED_FLAGS if max(shape) >= factor * imgsz), cv2.IMREAD_COLOR)
    image = cv2.imread(str(path), flag)
    height, width = resized_shape(*shape, imgsz)
    if image.shape[:2] == (height, width):
        return image
    return cv2.resize(image, (width, height), interpolation=cv2.INTER_LINEAR)


def cpu_ms(load, paths: list[Path]) -> float:
    start = time.process_time()
    for path in paths:
        load(path)
    return (time.process_time() - start) / len(paths) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=Path, required=True, help="a folder of JPEGs")
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(cpu_description())  # what the figures were measured on (docs/benchmarks.md)
    cv2.setNumThreads(0)  # one thread, as in a loader worker
    paths = sorted(path for path in args.images.iterdir() if path.suffix.lower() in (".jpg", ".jpeg"))
    if not paths:
        raise SystemExit(f"no JPEGs in {args.images}")
    shapes, differences = {}, []
    for path in paths:
        image = read_image(path)
        shapes[path] = image.shape[:2]
        if max(shapes[path]) >= 2 * args.imgsz:
            full = resize_to_imgsz(image, args.imgsz, augment=True)
            differences.append(np.abs(full.astype(np.int16) - reduced_load(path, args.imgsz, shapes[path])).mean())
    print(f"{len(paths)} JPEGs, {len(differences)} at least twice {args.imgsz} on the long side (the rest decode in "
          "full)")
    print(f"mean absolute pixel difference on those: {np.mean(differences):.2f} of 255")
    loads = {"full decode + resize": lambda path: load_resized(path, args.imgsz, augment=True),
             "reduced decode + resize": lambda path: reduced_load(path, args.imgsz, shapes[path])}
    times: dict[str, list[float]] = {name: [] for name in loads}
    for _ in range(args.rounds):
        for name, load in loads.items():
            times[name].append(cpu_ms(load, paths))
    for name, values in times.items():
        print(f"{name:>24}: {np.median(values):.2f} ms per source image (rounds: "
              f"{', '.join(f'{value:.2f}' for value in values)})")


if __name__ == "__main__":
    main()
