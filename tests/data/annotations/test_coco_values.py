"""data/annotations/coco_values.py: a COCO json's values as tools and pandas type them are read into one form, what
cannot be read as a number is one line naming the file and the entry, and each way of typing them scores what the same
labels score as .txt with both evaluators (the 12 stats, 1e-4), the ground truth handed to them being the normalised
one (it was an empty class table and every stat -1 for string category ids, a TypeError in faster-coco-eval for
string annotation ids)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from detect.data import load_data_config, load_split
from detect.data.annotations.coco_json import read_coco
from detect.data.annotations.coco_values import normalised
from detect.errors import UserError
from detect.evaluation.evaluator import CocoEvaluator
from tests.data.annotations.exports import pixel_corners
from tests.data.annotations.helpers import write_images

SIZES = {f"{index:02d}.jpg": (64 + 16 * (index % 3), 48 + 16 * (index % 2)) for index in range(8)}
NAMES = ["cat", "dog", "bird"]


def _json(**annotation: object) -> dict:
    return {"images": [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 48}],
            "categories": [{"id": 1, "name": "cat"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], **annotation}]}


@pytest.mark.parametrize("value", [7, 7.0, "7", "7.0", " 7 ", "+7", "7e0", "np.int64(7)", "numpy.float64(7.0)"])
def test_an_id_as_tools_type_it_is_a_whole_number(value):
    read = normalised(_json(id=value, category_id=value) | {"categories": [{"id": value, "name": "cat"}]}, Path("x"))
    assert read["annotations"][0]["id"] == 7 and read["annotations"][0]["category_id"] == 7
    assert read["categories"][0]["id"] == 7 and type(read["categories"][0]["id"]) is int


@pytest.mark.parametrize("value", [[1, 2, 3, 4], ["1", "2.0", " 3", "4"], "[1, 2, 3, 4]", "1,2,3,4", "(1 2 3 4)",
                                   ["np.float64(1.0)", 2, 3.0, "4"]])
def test_a_box_as_tools_type_it_is_four_floats(value):
    assert normalised(_json(bbox=value), Path("x"))["annotations"][0]["bbox"] == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize(("given", "crowd", "area"), [
    ({}, 0, 12.0), ({"iscrowd": True, "area": "10.5"}, 1, 10.5), ({"iscrowd": "0", "area": None}, 0, 12.0),
    ({"iscrowd": "false", "area": math.nan}, 0, 12.0), ({"iscrowd": 1.0, "area": 5}, 1, 5.0),
    ({"iscrowd": None}, 0, 12.0), ({"iscrowd": " TRUE "}, 1, 12.0)])
def test_iscrowd_and_area_as_tools_type_them(given, crowd, area):
    annotation = normalised(_json(**given), Path("x"))["annotations"][0]
    assert (annotation["iscrowd"], annotation["area"]) == (crowd, area)


@pytest.mark.parametrize(("change", "line"), [
    ({"id": "abc"}, "annotation 1 of 1 ('abc') has id 'abc', which is not a number"),
    ({"id": 1.5}, "has id 1.5, which is not a whole number"),
    ({"id": True}, "has id True, which is not a number"),
    ({"image_id": None}, "has image_id None, which is not a number"),
    ({"category_id": 2**64}, "which is not a whole number within the signed 64 bits"),
    ({"bbox": [1, 2, 3]}, "has bbox [1, 2, 3], which is not four numbers [x, y, width, height]"),
    ({"bbox": "x y w h"}, "has bbox 'x y w h', which is not four numbers"),
    ({"iscrowd": 2}, "has iscrowd 2, which is not 0 or 1 (or true, false)"),
    ({"area": "big"}, "has area 'big', which is not a number"),
])
def test_a_value_that_is_no_number_is_one_line_naming_the_file_and_the_entry(change, line):
    with pytest.raises(UserError, match="^x.json: ") as raised:
        normalised(_json(**change), Path("x.json"))
    assert line in str(raised.value) and "\n" not in str(raised.value)


def test_annotations_null_are_none():
    assert normalised(_json() | {"annotations": None}, Path("x.json"))["annotations"] == []


def test_an_image_or_category_that_is_no_number_is_named_too():
    data = _json()
    data["images"][0]["width"] = "wide"
    with pytest.raises(UserError, match=r"x.json: image 1 of 1 \('a.jpg'\) has width 'wide', which is not a number"):
        normalised(data, Path("x.json"))
    with pytest.raises(UserError, match="x.json: category 1 of 1 .* has no 'name'"):
        normalised(_json() | {"categories": [{"id": 1}]}, Path("x.json"))
    data["images"][0]["width"] = "0"  # a box is a fraction of the image: it was 'not a COCO instances json
    with pytest.raises(UserError, match=r"image 1 of 1 \('a.jpg'\) has width '0', which is not a whole number above 0"):
        normalised(data, Path("x.json"))  # (ValueError: an image with width or height <= 0)', naming no image


def test_two_categories_of_one_id_as_tools_type_it_are_named(tmp_path: Path) -> None:
    data = _json()
    data["categories"].append({"id": "1.0", "name": "dog"})  # the same id once read
    (tmp_path / "x.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="x.json: categories 'cat' and 'dog' share id 1: each category needs an id"):
        read_coco(tmp_path / "x.json")


def _dataset(root: Path) -> tuple[Path, list]:
    """root/images (8 images), their .txt labels (three classes, up to three boxes), txt.yaml; and their records."""
    write_images(root / "images", SIZES)
    rng = np.random.default_rng(5)
    (root / "labels").mkdir()
    for name in SIZES:
        rows = [(int(rng.integers(3)), *rng.uniform(0.3, 0.7, 2), *rng.uniform(0.1, 0.4, 2))
                for _ in range(int(rng.integers(1, 4)))]
        (root / "labels" / name.replace(".jpg", ".txt")).write_text("".join(
            f"{cls} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}\n" for cls, cx, cy, w, h in rows))
    source = root / "txt.yaml"
    source.write_text(yaml.safe_dump({"path": str(root), "train": "images", "val": "images", "names": NAMES}))
    return source, list(load_split(load_data_config(source), "val").records)


def _typed(records: list, root: Path, name: str, image_id: Callable, category_id: Callable, annotation_id: Callable,
           box: Callable = list, extra: Callable = lambda index: {}) -> Path:
    """The records' boxes as a COCO json whose values `image_id(n)`, `category_id(k)`, `annotation_id(m)`,
    `box([x, y, w, h])` and `extra(m)` type; its data yaml."""
    images, annotations = [], []
    for number, record in enumerate(records):
        images.append({"id": image_id(number), "file_name": record.path.name, "width": int(record.width),
                       "height": int(record.height)})
        for cls, (x1, y1, x2, y2) in zip(record.classes, pixel_corners(record).tolist()):
            annotations.append({"id": annotation_id(len(annotations)), "image_id": image_id(number),
                                "category_id": category_id(int(cls)), "bbox": box([x1, y1, x2 - x1, y2 - y1]),
                                "area": (x2 - x1) * (y2 - y1), "iscrowd": 0, **extra(len(annotations))})
    categories = [{"id": category_id(index), "name": label} for index, label in enumerate(NAMES)]
    (root / f"{name}.json").write_text(json.dumps({"images": images, "annotations": annotations,
                                                   "categories": categories}))
    source = root / f"{name}.yaml"
    split = {"annotations": f"{name}.json", "images": "images"}
    source.write_text(yaml.safe_dump({"path": str(root), "train": split, "val": split, "names": NAMES}))
    return source


def _without_area(index: int) -> dict:
    return {"area": None} if index % 2 else {"area": math.nan}


VARIANTS = {  # name -> image_id, category_id, annotation_id, box, extra
    "category ids as strings": (lambda n: n + 1, lambda k: str(k + 1), lambda m: m + 1),
    "annotation ids as strings": (lambda n: n + 1, lambda k: k + 1, lambda m: str(m + 1)),
    "ids as floats": (lambda n: float(n + 1), lambda k: f"{k + 1}.0", lambda m: m + 1.0),
    "numpy-ish strings": (lambda n: f"np.int64({n + 1})", lambda k: f"numpy.int32({k + 1})",
                          lambda m: f"np.float64({m + 1}.0)", lambda box: [f"np.float64({value!r})" for value in box]),
    "bbox as strings": (lambda n: n + 1, lambda k: k + 1, lambda m: m + 1, lambda box: str(box)),
    "bbox as lists of strings": (lambda n: n + 1, lambda k: k + 1, lambda m: m + 1, lambda box: [str(v) for v in box]),
    "iscrowd as bool and '0'": (lambda n: n + 1, lambda k: k + 1, lambda m: m + 1, list,
                                lambda m: {"iscrowd": False if m % 2 else "0"}),
    "area missing, null or NaN": (lambda n: n + 1, lambda k: k + 1, lambda m: m + 1, list, _without_area),
    "ids as large ints": (lambda n: 2**40 + n, lambda k: 2**35 + k, lambda m: 2**62 + m),
    "negative ids": (lambda n: -n - 1, lambda k: -k - 1, lambda m: -m - 1),
    "annotation ids from 0": (lambda n: n, lambda k: k, lambda m: m),
}


def _stats(split, backend: str) -> tuple[float, ...]:
    """The 12 stats of the same detections (each box moved, a miss and a false box) against `split`'s ground truth;
    no two scores alike, as COCOeval breaks a tie by the order of the image ids."""
    evaluator = CocoEvaluator.for_split(split, backend)
    scores = iter(np.linspace(0.95, 0.05, 64))
    for record in split.records:
        corners = pixel_corners(record)
        rows = [[x1 + 1.5, y1 - 1, x2 + 2, y2, next(scores), float(cls)]
                for index, (cls, (x1, y1, x2, y2)) in enumerate(zip(record.classes, corners.tolist())) if index != 1]
        rows.append([0, 0, 10, 10, next(scores), 0.0])
        evaluator.add(int(record.image_id), np.array(rows, np.float64))
    return evaluator.evaluate().stats


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("typed")
    source, records = _dataset(root)
    txt = load_split(load_data_config(source), "val")
    return root, records, {backend: _stats(txt, backend) for backend in ("pycocotools", "faster-coco-eval")}


@pytest.mark.parametrize("backend", ["pycocotools", "faster-coco-eval"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_way_of_typing_the_values_scores_as_the_txt_labels(dataset, variant, backend):
    root, records, txt_stats = dataset
    source = _typed(records, root, variant.replace(" ", "_").replace("'", ""), *VARIANTS[variant])
    stats = _stats(load_split(load_data_config(source), "val"), backend)
    assert 0.1 < txt_stats[backend][0] < 0.9  # a score that detections and misses move
    assert stats == pytest.approx(txt_stats[backend], abs=1e-4)
