"""Sizes a hostile file or flag can ask for, run as a user would (the CLI in a process of its own) under a memory
cap: a pixel bomb among good images, 20000x10 images, `--imgsz 100000`, 100,000 classes, 20,000 classes, a yaml alias
bomb. Each ends with a one-line refusal (exit 2) or does what can be done, never a traceback (docs/bad-input.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.data.helpers import write_flat_png, write_yaml
from tests.hostile import assert_refused
from tests.test_config import alias_bomb
from tests.training.helpers import tiny_dataset, train_args
from tests.user_run import run_cli


def predicted(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr


def predict_args(weights: Path, source: Path, project: Path, *extra: str) -> list[str]:
    return ["--weights", str(weights), "--source", str(source), "--device", "cpu", "--project", str(project),
            "--imgsz", "96", *extra]


def good_images(folder: Path, count: int = 2) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"good{index}.jpg" for index in range(count)]
    for index, path in enumerate(paths):
        cv2.imwrite(str(path), np.random.default_rng(index).integers(0, 255, (60, 80, 3), dtype=np.uint8))
    return paths


def test_a_pixel_bomb_among_good_images_is_skipped_by_name_and_the_others_predicted(weights, tmp_path):
    """Case 14: a 30000x30000 PNG of 0.9 MB (2.7 GB decoded) under a 2 GB cap."""
    source = tmp_path / "images"
    good = good_images(source)
    bomb = write_flat_png(source / "bomb.png", 30000, 30000)
    assert bomb.stat().st_size < 2**20
    log = predicted(run_cli("detect.predict", *predict_args(weights, source, tmp_path / "runs"), memory_gb=2))
    assert (f"{bomb}: ImageTooLarge: 30000x30000 is 900,000,000 pixels, more than the limit of 89,478,485 "
            "(--max-pixels)") in log
    assert sorted(path.name for path in (tmp_path / "runs" / "exp").iterdir()) == [path.name for path in good]


def test_images_of_20000x10_and_10x20000_are_predicted_with_the_others(weights, tmp_path):
    """Case 7: a side that rounds to 0 in the letterbox is one pixel."""
    source = tmp_path / "images"
    good_images(source)
    cv2.imwrite(str(source / "wide.png"), np.full((10, 20000, 3), 200, np.uint8))
    cv2.imwrite(str(source / "tall.png"), np.full((20000, 10, 3), 200, np.uint8))
    log = predicted(run_cli("detect.predict", *predict_args(weights, source, tmp_path / "runs"), memory_gb=8))
    assert f"{source / 'wide.png'}: 32x96 " in log and f"{source / 'tall.png'}: 96x32 " in log
    assert len(list((tmp_path / "runs" / "exp").iterdir())) == 4


def test_an_image_size_past_the_bound_is_refused_in_one_line(weights, tmp_path):
    """Case 9: --imgsz 100000 (every CLI's flag: tests/test_cli.py; the hub's size: tests/test_hub.py)."""
    good_images(tmp_path / "images")
    result = run_cli("detect.predict", *predict_args(weights, tmp_path / "images", tmp_path / "runs", "--imgsz",
                                                      "100000"), memory_gb=8, timeout=60)
    assert assert_refused(result) == "error: argument --imgsz: must be an integer in [1, 8192], got '100000'"


def test_a_hyp_alias_bomb_is_refused_in_one_line(tmp_path):
    """Case 6: ten aliases of ten aliases, eight deep, in a known key, under a 3 GB cap."""
    hyp = tmp_path / "hyp.yaml"
    hyp.write_text(alias_bomb(levels=8))
    data = tiny_dataset(tmp_path / "data", count=4)
    result = run_cli("detect.train", *train_args(data, tmp_path / "runs", "--hyp", str(hyp), epochs=1), memory_gb=3,
                        timeout=60)
    assert_refused(result, str(hyp), "its aliases repeat 234,567,890 nodes")


def test_more_classes_than_the_bound_are_refused_with_the_memory_they_would_take(tmp_path):
    """Case 5: nc 100000 with 100,000 names, 4 images, yolov5n at 64 (under an 8 GB cap it trained in 6.9 GB; the
    bound is 50,000)."""
    tiny_dataset(tmp_path / "data", count=4)
    data = write_yaml(tmp_path / "data", names=tuple(f"class{index}" for index in range(100_000)))
    result = run_cli("detect.train", *train_args(data, tmp_path / "runs", epochs=1), memory_gb=8, timeout=120)
    assert_refused(result, "100,000 classes: more than the 50,000", "134,406,720 weights: 0.5 GB in float32")


@pytest.mark.slow
def test_20000_classes_train_in_a_few_gigabytes(tmp_path):
    """V3Det's 13,204 classes and more: a confusion matrix of the pairs seen, COCOeval on the classes present."""
    tiny_dataset(tmp_path / "data", count=4)
    data = write_yaml(tmp_path / "data", names=tuple(f"class{index}" for index in range(20_000)))
    result = run_cli("detect.train", *train_args(data, tmp_path / "runs", epochs=1), memory_gb=4, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    run = tmp_path / "runs" / "exp"
    assert {"confusion_matrix.png", "labels.png", "PR_curve.png"} <= {path.name for path in run.iterdir()}
    assert " class1 " in result.stderr  # the per-class table: the classes with boxes


@pytest.mark.slow
def test_two_million_boxes_on_one_image_of_a_coco_json_skip_that_image(tmp_path):
    """A 150 MB COCO json holding 2 million boxes on one of 8 images: train (which never reached its first step) and
    val (which scored them through faster-coco-eval until MemoryError) skip that image by name under --max-boxes and
    go on, under a 6 GB cap."""
    data = tiny_dataset(tmp_path / "data")
    images = sorted((tmp_path / "data" / "images" / "train").iterdir())
    box = '{{"id": {}, "image_id": 1, "category_id": 1, "bbox": [8, 10, 42, 50], "area": 2100, "iscrowd": 0}}'
    listing = ", ".join(f'{{"id": {number + 1}, "file_name": "{image.name}", "width": 96, "height": 128}}'
                        for number, image in enumerate(images))
    others = ", ".join(box.replace('"image_id": 1', f'"image_id": {number}').format(10**7 + number)
                       for number in range(2, len(images) + 1))
    labels = tmp_path / "data" / "dense.json"
    labels.write_text('{"categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}], '
                      f'"images": [{listing}], "annotations": [{others}, '
                      + ", ".join(box.format(number) for number in range(1, 2_000_001)) + "]}")
    split = {"annotations": str(labels), "images": "images/train"}
    data = write_yaml(tmp_path / "data", train=split, val=split)
    done = run_cli("detect.train", *train_args(data, tmp_path / "runs", epochs=1), timeout=300, memory_gb=6,
                   merge_output=True)
    assert done.returncode == 0 and "Traceback" not in done.stdout, done.stdout[-3000:]
    assert done.stdout.count("skipped: too many boxes                         1") == 2  # train and val
    assert (f"{labels}: 1 of its 8 images are not in the split (not in the images folder, or skipped by the label "
            "check): their boxes are not scored") in done.stdout
    details = (tmp_path / "data" / "dense.json.train.detect.problems.txt").read_text()
    assert f"{images[0]}: too many boxes (2,000,000, more than the 10,000 an image may hold: --max-boxes)" in details
    done = run_cli("detect.val", "--weights", str(tmp_path / "runs" / "exp" / "weights" / "best.pt"), "--data",
                   str(data), "--imgsz", "64", "--device", "cpu", "--project", str(tmp_path / "runs"), timeout=300,
                   memory_gb=6, merge_output=True)
    assert done.returncode == 0 and "Traceback" not in done.stdout, done.stdout[-3000:]
    assert re.search(r", val split: 7 images at 64 px$", done.stdout, re.MULTILINE), done.stdout[-3000:]
