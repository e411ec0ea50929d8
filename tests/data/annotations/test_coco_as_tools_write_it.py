"""COCO jsons as converters and labelling tools write them, scored by `python -m detect.val` as a user runs it: each
scores what the same labels score as .txt (the 12 COCO stats to their 4 printed places), with one line saying what
was done; what cannot be read one way only is one line, exit 2."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from detect.data import load_data_config, load_split
from detect.data.categories import COCO_NAMES
from tests.data.annotations.exports import pixel_corners
from tests.shared_data import COCO128, YOLOV5N, needs_shared
from tests.user_run import run_cli

pytestmark = [needs_shared, pytest.mark.slow]
IMAGES = 32  # yolov5n at 320 on 32 coco128 images: mAP@.5:.95 about 0.35, a real score


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """images.txt (32 coco128 images), half.txt (every other one) and txt.yaml (their .txt labels)."""
    folder = tmp_path_factory.mktemp("tools")
    images = sorted((COCO128 / "images" / "train2017").iterdir())[:IMAGES]
    (folder / "images.txt").write_text("".join(f"{image}\n" for image in images))
    (folder / "half.txt").write_text("".join(f"{image}\n" for image in images[::2]))
    _yaml(folder / "txt.yaml", "images.txt")
    return folder


def _yaml(path: Path, images: str, annotations: Path | None = None) -> Path:
    split = images if annotations is None else {"annotations": str(annotations), "images": images}
    path.write_text(yaml.safe_dump({"path": str(path.parent), "train": split, "val": split,
                                    "names": list(COCO_NAMES)}))
    return path


def _write_json(folder: Path, name: str, category: Callable[[int], tuple[int, str]],
                annotation_id: Callable[[int, int], int]) -> Path:
    """The 32 images' .txt labels as a COCO json: class k as category `category(k)` (id, name); the n-th box of an
    image, the m-th of the file, gets id `annotation_id(n, m)`."""
    records = load_split(load_data_config(folder / "txt.yaml"), "val").records
    images, annotations = [], []
    for number, record in enumerate(records, start=1):
        images.append({"id": number, "file_name": record.path.name, "width": int(record.width),
                       "height": int(record.height)})
        for index, (cls, (x1, y1, x2, y2)) in enumerate(zip(record.classes, pixel_corners(record).tolist())):
            annotations.append({"id": annotation_id(index, len(annotations)), "image_id": number,
                                "category_id": category(int(cls))[0], "bbox": [x1, y1, x2 - x1, y2 - y1],
                                "area": (x2 - x1) * (y2 - y1), "iscrowd": 0, "segmentation": []})
    categories = [dict(zip(("id", "name"), category(index))) for index in range(len(COCO_NAMES))]
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def _val(data: Path, images: int, *flags: str) -> tuple[list[str], str]:
    """The 12 COCO stats `val --verbose` prints, and what it printed."""
    done = run_cli("detect.val", "--weights", str(YOLOV5N), "--data", str(data), "--imgsz", "320", "--device", "cpu",
                   "--no-progress", "--verbose", "--project", str(data.parent / "runs"), *flags, timeout=300,
                   memory_gb=6, merge_output=True)
    assert done.returncode == 0 and "Traceback" not in done.stdout, done.stdout[-3000:]
    assert re.search(rf", val split: {images} images at 320 px$", done.stdout, re.MULTILINE), done.stdout[-3000:]
    return re.findall(r"^ *(?:AP|AR)\w*: (\d\.\d{4})$", done.stdout, re.MULTILINE), done.stdout


@pytest.fixture(scope="module")
def txt_stats(folder: Path) -> list[str]:
    stats, _ = _val(folder / "txt.yaml", IMAGES)
    assert len(stats) == 12 and 0.2 < float(stats[0]) < 0.5, stats
    return stats


CASES = {
    # the order of the yaml's names, named otherwise ("0".."79"): read in id order, one line
    "categories 1-80 named 0-79": (lambda k: (k + 1, str(k)), lambda n, m: m + 1,
                                   ("none of its 80 category names (['0', '1', '2', '3', ...]) is one of the data "
                                   "yaml's names: its categories are read in id order as the yaml's classes "
                                   "(1 -> 'person', 80 -> 'toothbrush')")),
    "categories 0-79 named as the yaml": (lambda k: (k, COCO_NAMES[k]), lambda n, m: m + 1, None),
    # Datumaro-like: ids numbered within each image, so COCO's index would keep one box per id
    "annotation ids per image": (lambda k: (k + 1, COCO_NAMES[k]), lambda n, m: n + 1,
                                 "its 209 annotations have 24 distinct ids: numbered 1..209 for scoring"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_tools_json_scores_as_the_txt_labels(folder: Path, txt_stats: list[str], case: str) -> None:
    category, annotation_id, line = CASES[case]
    labels = _write_json(folder, case.replace(" ", "_"), category, annotation_id)
    stats, printed = _val(_yaml(folder / f"{labels.stem}.yaml", "images.txt", labels), IMAGES)
    assert stats == txt_stats
    assert line is None or line in printed, printed[-3000:]


# Values as tools and pandas type them (issue 58): read once into one form (data/annotations/coco_values.py), which is
# what reaches the evaluator. Every other way of typing them is scored against the .txt labels in
# tests/data/annotations/test_coco_values.py, with both evaluators, without a model.
TYPED = {
    # it was an empty class table and every stat -1.0000, exit 0
    "category ids as strings": (lambda k: (str(k + 1), COCO_NAMES[k]), lambda n, m: m + 1),
    # it was faster-coco-eval's TypeError: ids must be an int or an iterable of ints
    "annotation ids as strings": (lambda k: (k + 1, COCO_NAMES[k]), lambda n, m: str(m + 1)),
    # pandas' index: COCOeval reads annotation id 0 as "unmatched"
    "annotation ids from 0 as floats": (lambda k: (float(k + 1), COCO_NAMES[k]), lambda n, m: float(m)),
}


@pytest.mark.parametrize(("case", "evaluator"), [(case, evaluator) for case in list(TYPED)[:2]
                                                 for evaluator in ("pycocotools", "faster-coco-eval")]
                         + [(list(TYPED)[2], "faster-coco-eval")])  # its box of id 0 was never matched
def test_ids_as_tools_type_them_score_as_the_txt_labels(folder: Path, txt_stats: list[str], case: str,
                                                        evaluator: str) -> None:
    labels = _write_json(folder, case.replace(" ", "_"), *TYPED[case])
    stats, printed = _val(_yaml(folder / f"{labels.stem}.yaml", "images.txt", labels), IMAGES, "--evaluator",
                          evaluator)
    assert stats == txt_stats, printed[-3000:]
    assert ("numbered 1..209 for scoring" in printed) == (case == "annotation ids from 0 as floats")


def test_images_the_folder_lacks_are_not_scored_and_counted(folder: Path) -> None:
    half, _ = _val(_yaml(folder / "half_txt.yaml", "half.txt"), IMAGES // 2)
    labels = _write_json(folder, "all", lambda k: (k + 1, COCO_NAMES[k]), lambda n, m: m + 1)
    stats, printed = _val(_yaml(folder / "half_json.yaml", "half.txt", labels), IMAGES // 2)
    assert stats == half
    assert f"all.json: {IMAGES // 2} of its {IMAGES} images are not in the split" in printed


def _refused(folder: Path, name: str, content: object) -> str:
    labels = folder / f"{name}.json"
    labels.write_text(json.dumps(content) if not isinstance(content, str) else content)
    done = run_cli("detect.val", "--weights", str(YOLOV5N), "--data", str(_yaml(folder / f"{name}.yaml",
                                                                                  "images.txt", labels)),
                   "--imgsz", "320", "--device", "cpu", timeout=120, memory_gb=6)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1, done.stderr[-3000:]
    return errors[0]


def test_duplicate_image_ids_an_unlisted_category_and_a_deep_nest_are_one_line(folder: Path) -> None:
    labels = json.loads(_write_json(folder, "ok", lambda k: (k + 1, COCO_NAMES[k]), lambda n, m: m + 1).read_text())
    twice = {**labels, "images": [*labels["images"], {**labels["images"][0], "file_name": "elsewhere.jpg"}]}
    assert _refused(folder, "twice", twice).endswith(
        "twice.json: images '000000000009.jpg' and 'elsewhere.jpg' share id 1: each image needs an id of its own "
        "(the boxes of image 1 could belong to either)")
    unlisted = {**labels, "annotations": [*labels["annotations"], {**labels["annotations"][0], "id": 5000,
                                                                      "category_id": 999}]}
    assert _refused(folder, "unlisted", unlisted).endswith(
        "unlisted.json: annotation 5000 has category_id 999, which is not among its categories "
        "(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ...)")
    deep = "[" * 100_000 + "]" * 100_000
    assert _refused(folder, "deep", '{"images": ' + deep + "}").endswith(
        "deep.json: not a COCO instances json (nested deeper than the 1000 levels Python reads)")
    assert _refused(folder, "deep_tasks", deep).endswith(  # a list: a Label Studio export
        "deep_tasks.json: not a Label Studio JSON export (nested deeper than the 1000 levels Python reads)")
