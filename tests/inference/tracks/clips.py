"""Short clips for the tracking tests, made from coco128's photos (tests/shared_data.py): a person cut from one photo
(its label's box) moving over another, at a size and frame size the test picks; each frame's true box is known."""

from __future__ import annotations

import cv2
import numpy as np

from tests.shared_data import COCO128

PERSON_PHOTO, PERSON_LABEL = "000000000241.jpg", 3  # a standing person, yolov5n finds it at 48 px tall
BACKGROUND_PHOTO = "000000000143.jpg"  # birds on a fence


def person() -> np.ndarray:
    """The person's crop, BGR."""
    image = cv2.imread(str(COCO128 / "images" / "train2017" / PERSON_PHOTO))
    row = (COCO128 / "labels" / "train2017" / PERSON_PHOTO).with_suffix(".txt").read_text().splitlines()[PERSON_LABEL]
    _, cx, cy, w, h = map(float, row.split())
    height, width = image.shape[:2]
    x1, y1 = int((cx - w / 2) * width), int((cy - h / 2) * height)
    return image[y1:y1 + int(h * height), x1:x1 + int(w * width)]


def clip(frames: int, size: tuple[int, int], person_height: int, step: int = 6) -> tuple[list[np.ndarray],
                                                                                        list[np.ndarray]]:
    """`frames` (h, w) BGR frames of the person, `person_height` px tall, walking right by `step` px a frame, and its
    true [x1, y1, x2, y2] box in each."""
    height, width = size
    background = cv2.resize(cv2.imread(str(COCO128 / "images" / "train2017" / BACKGROUND_PHOTO)), (width, height))
    crop = person()
    crop = cv2.resize(crop, (round(crop.shape[1] * person_height / crop.shape[0]), person_height),
                      interpolation=cv2.INTER_AREA)
    images, boxes = [], []
    top = (height - person_height) // 2
    for index in range(frames):
        left = width // 8 + index * step
        image = background.copy()
        image[top:top + crop.shape[0], left:left + crop.shape[1]] = crop
        images.append(image)
        boxes.append(np.array([left, top, left + crop.shape[1], top + crop.shape[0]], np.float32))
    return images, boxes
