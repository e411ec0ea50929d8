"""One validation pass: a file the loader could not read is named and left out of the scores, never scored."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from detect import backend as backends
from detect.data import LetterboxInfo, Sample, collate
from detect.evaluation.evaluator import CocoEvaluator
from detect.evaluation.report import problems_list
from detect.evaluation.val_loop import PassOptions, evaluate
from tests.evaluation.test_evaluator import tiny_dataset

NAMES = ["cat", "dog", "bird"]
SIZE = (100, 200)  # (h, w) of the tiny dataset's images, fed as they are: gain 1, no padding


def fixed_outputs(decoded: torch.Tensor):
    """A stand-in for any predict callable: returns the given decoded rows (B, N, 5 + nc) whatever the images."""
    return lambda images: decoded[: images.shape[0]]


def decoded_rows() -> torch.Tensor:
    """Image 1: its cat and dog exactly (score 0.9). Image 2: a 'cat' where its dog is (a false positive)."""
    height, width = SIZE
    rows = torch.zeros(2, 2, 5 + len(NAMES))
    for image, record in enumerate(tiny_dataset()):
        boxes = torch.from_numpy(record.boxes[~record.crowd] * np.array([width, height, width, height]))
        for slot, box in enumerate(boxes):
            rows[image, slot, :4] = box
            rows[image, slot, 4] = 0.9
            rows[image, slot, 5 + (int(record.classes[slot]) if image == 0 else 0)] = 1.0
    return rows


def batch(unreadable: bool):
    """Both tiny images in one batch; image 2 as a grey placeholder for an unreadable file when `unreadable`."""
    samples = []
    for record in tiny_dataset():
        placeholder = unreadable and record.image_id == 2
        samples.append(Sample(image=np.full((3, *SIZE), 114, np.uint8), labels=np.zeros((0, 5), np.float32),
                              path=str(record.path), image_id=record.image_id,
                              letterbox=LetterboxInfo(original=SIZE, gain=1.0, pad=(0.0, 0.0)),
                              problems=(f"{record.path}: image file is truncated",) if placeholder else (),
                              usable=not placeholder))
    return collate(samples)


@pytest.mark.parametrize("unreadable", [False, True])
def test_an_unreadable_image_is_named_and_not_scored(unreadable: bool) -> None:
    evaluator = CocoEvaluator.from_records(tiny_dataset(), NAMES)
    seen = []
    result = evaluate(fixed_outputs(decoded_rows()), [batch(unreadable)], backends.select("cpu"), evaluator,
                      options=PassOptions(False, lambda image: seen.append(image.image_id)))
    assert result.images == 2
    if unreadable:
        # Image 2 is out: no detections of it kept or saved, its dog not counted; image 1 alone scores 1.0.
        assert result.problems == ("a/2.jpg: image file is truncated",)
        assert seen == [1] and {r["image_id"] for r in evaluator.results()} == {1}
        assert result.metrics.map50_95 == pytest.approx(1.0) and result.metrics.class_instances == (1, 1, 0)
    else:
        # Read fine, image 2 is scored: its dog is missed and its 'cat' is a false positive.
        assert result.problems == () and seen == [1, 2]
        assert result.metrics.map50_95 < 0.9 and result.metrics.class_instances == (1, 2, 0)


def test_problems_are_counted_and_named() -> None:
    lines = ("a/2.jpg: image file is truncated", "a/7.jpg: cannot identify image file")
    assert problems_list(lines) == ("unreadable files, left out of the scores: 2\n"
                                    "  a/2.jpg: image file is truncated\n  a/7.jpg: cannot identify image file")
    assert problems_list(()) == ""
