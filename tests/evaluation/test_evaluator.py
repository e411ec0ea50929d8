"""COCO evaluator: the reference numbers of pycocotools, faster-coco-eval agreement, hand-made cases."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from detect.data.categories import COCO_CATEGORY_IDS, COCO_NAMES
from detect.data.records import ImageRecord
from detect.errors import UserError
from detect.evaluation.evaluator import COCO_STAT_NAMES, CocoEvaluator
from tests.shared_data import COCO128_JSON, EVAL_FIXTURES, needs_shared

BACKENDS = ["pycocotools"] + (["faster-coco-eval"] if importlib.util.find_spec("faster_coco_eval") else [])


def load(path: Path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


@needs_shared
@pytest.mark.parametrize("backend", BACKENDS)
def test_cocoapi_fake_results_give_the_reference_stats(backend: str) -> None:
    folder = EVAL_FIXTURES / "cocoapi_val2014_100"
    evaluator = CocoEvaluator.from_coco_json(folder / "instances_val2014_100.json", backend=backend)
    evaluator.add_coco_results(load(folder / "instances_val2014_fakebbox100_results.json"))
    metrics = evaluator.evaluate()
    expected = load(folder / "expected_pycocotools_bbox.json")["stats"]
    assert expected["AP"] == pytest.approx(0.5045806987249628, abs=1e-15)
    for name, value in zip(COCO_STAT_NAMES, metrics.stats):
        assert value == pytest.approx(expected[name], abs=1e-9), name
    assert metrics.map50_95 == metrics.stats[0] and metrics.map50 == metrics.stats[1]
    # Per-class AP averages to the overall AP over the classes with ground truth (as summarize() does).
    valid = [ap for ap in metrics.class_ap50_95 if not math.isnan(ap)]
    assert np.mean(valid) == pytest.approx(metrics.map50_95, abs=1e-12)


@needs_shared
@pytest.mark.parametrize("backend", BACKENDS)
def test_yolov5n_coco128_predictions_give_the_reference_ap(backend: str) -> None:
    folder = EVAL_FIXTURES / "yolov5n_coco128"
    evaluator = CocoEvaluator.from_coco_json(COCO128_JSON, backend=backend)
    evaluator.add_coco_results(load(folder / "yolov5n_train2017_predictions_cocoids.json"))
    metrics = evaluator.evaluate()
    expected = load(folder / "expected_metrics.json")["train2017"]
    stats = expected["pycocotools_bbox_vs_annotations_instances_train2017_json"]["stats"]
    for name, value in zip(COCO_STAT_NAMES, metrics.stats):
        assert value == pytest.approx(stats[name], abs=1e-9), name
    assert sum(metrics.class_instances) == 929  # 939 annotations less 10 crowd
    assert 0.4 < metrics.precision < 0.9 and 0.4 < metrics.recall < 0.9


@needs_shared
def test_add_with_class_indices_matches_coco_results() -> None:
    # The same detections given as (n, 6) xyxy rows with class indices: class k -> sorted(category ids)[k].
    folder = EVAL_FIXTURES / "yolov5n_coco128"
    results = load(folder / "yolov5n_train2017_predictions_cocoids.json")
    evaluator = CocoEvaluator.from_coco_json(COCO128_JSON)
    by_image: dict[int, list] = {}
    for r in results:
        x, y, w, h = r["bbox"]
        row = [x, y, x + w, y + h, r["score"], evaluator.category_ids.index(r["category_id"])]
        by_image.setdefault(r["image_id"], []).append(row)
    for image_id, rows in by_image.items():
        evaluator.add(image_id, torch.tensor(rows, dtype=torch.float64))
    metrics = evaluator.evaluate()
    assert metrics.map50_95 == pytest.approx(0.37026239370625214, abs=1e-6)
    assert metrics.map50 == pytest.approx(0.57656579812808, abs=1e-6)


def tiny_dataset() -> list[ImageRecord]:
    """Two 200x100 images: a cat and a dog in the first, one dog and a crowd region in the second."""
    first = ImageRecord(Path("a/1.jpg"), 1, 200, 100, np.array([0, 1]),
                        np.array([[0.25, 0.5, 0.2, 0.4], [0.75, 0.5, 0.3, 0.6]], np.float32),
                        np.array([False, False]))
    second = ImageRecord(Path("a/2.jpg"), 2, 200, 100, np.array([1, 1]),
                         np.array([[0.5, 0.5, 0.4, 0.8], [0.1, 0.1, 0.1, 0.1]], np.float32),
                         np.array([False, True]))
    return [first, second]


def perfect_detections(records: list[ImageRecord]) -> dict[int, torch.Tensor]:
    """The non-crowd ground truth as xyxy pixel detections with score 0.9."""
    out = {}
    for r in records:
        scale = np.array([r.width, r.height, r.width, r.height])
        cx, cy, w, h = (r.boxes[~r.crowd] * scale).T
        rows = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, np.full_like(cx, 0.9), r.classes[~r.crowd]], 1)
        out[r.image_id] = torch.tensor(rows)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_record_ground_truth_perfect_and_shifted(backend: str) -> None:
    records = tiny_dataset()
    evaluator = CocoEvaluator.from_records(records, ["cat", "dog", "bird"], backend=backend)
    assert evaluator.category_ids == (1, 2, 3)
    for image_id, rows in perfect_detections(records).items():
        evaluator.add(image_id, rows)
    perfect = evaluator.evaluate()
    assert perfect.map50_95 == pytest.approx(1.0) and perfect.map50 == pytest.approx(1.0)
    assert perfect.class_ap50_95[:2] == pytest.approx((1.0, 1.0)) and math.isnan(perfect.class_ap50_95[2])
    assert perfect.class_instances == (1, 2, 0)
    assert perfect.precision == pytest.approx(1.0) and perfect.recall == pytest.approx(1.0)

    result = shifted_evaluator(backend).evaluate()
    assert result.map50 == pytest.approx(1.0)
    assert 0.2 < result.map50_95 < 0.8


def shifted_evaluator(backend: str = "pycocotools", names: Sequence[str] = ("cat", "dog", "bird")) -> CocoEvaluator:
    """The tiny dataset's evaluator holding its ground truth moved right by 15% of each box's width."""
    records = tiny_dataset()
    shifted = CocoEvaluator.from_records(records, names, backend=backend)
    for image_id, rows in perfect_detections(records).items():
        moved = rows.clone()
        moved[:, [0, 2]] += 0.15 * (rows[:, 2] - rows[:, 0])[:, None]  # IoU 0.74: counts at .5-.7 only
        shifted.add(image_id, moved)
    return shifted


def test_saved_ground_truth_and_predictions_rescore_with_bare_pycocotools(tmp_path: Path) -> None:
    # What --save-json writes for a YOLO-format dataset: both files, so that anyone can rescore them alone.
    evaluator = shifted_evaluator()
    ours = evaluator.evaluate()
    ground_truth = COCO(str(evaluator.save_ground_truth(tmp_path / "ground_truth.json")))
    coco_eval = COCOeval(ground_truth, ground_truth.loadRes(str(evaluator.save_json(tmp_path / "predictions.json"))),
                         "bbox")
    coco_eval.evaluate()
    coco_eval.accumulate()
    coco_eval.summarize()
    assert 0.2 < ours.map50_95 < 0.8
    np.testing.assert_allclose(coco_eval.stats, ours.stats, rtol=0, atol=1e-12)


def test_coco_names_on_yolo_labels_give_coco_category_ids() -> None:
    # A YOLO-format COCO dataset (yolov5's coco.yaml names): class k is COCO's k-th id, class 79 is id 90.
    record = ImageRecord(Path("b/9.jpg"), 9, 200, 100, np.array([0, 79]),
                         np.array([[0.25, 0.5, 0.2, 0.4], [0.75, 0.5, 0.3, 0.6]], np.float32), np.zeros(2, bool))
    evaluator = CocoEvaluator.from_records([record], COCO_NAMES)
    assert evaluator.category_ids == COCO_CATEGORY_IDS
    assert [a["category_id"] for a in evaluator.ground_truth.dataset["annotations"]] == [1, 90]
    evaluator.add(9, torch.tensor([[10.0, 20.0, 50.0, 60.0, 0.5, 79.0], [10.0, 20.0, 50.0, 60.0, 0.5, 11.0]]))
    assert [r["category_id"] for r in evaluator.results()] == [90, 13]


def test_detection_on_crowd_region_is_ignored() -> None:
    records = tiny_dataset()
    evaluator = CocoEvaluator.from_records(records, ["cat", "dog", "bird"])
    for image_id, rows in perfect_detections(records).items():
        evaluator.add(image_id, rows)
    evaluator.add(2, torch.tensor([[10.0, 5.0, 30.0, 15.0, 0.95, 1.0]]))  # exactly the crowd box, high score
    assert evaluator.evaluate().map50_95 == pytest.approx(1.0)


def test_zero_detections_give_zeros(tmp_path: Path) -> None:
    evaluator = CocoEvaluator.from_records(tiny_dataset(), ["cat", "dog", "bird"])
    evaluator.add(1, torch.zeros(0, 6))
    metrics = evaluator.evaluate()
    assert metrics.stats == (0.0,) * 12 and metrics.precision == 0.0 and metrics.fitness == 0.0
    assert metrics.class_ap50[:2] == (0.0, 0.0) and math.isnan(metrics.class_ap50[2])
    assert json.loads(evaluator.save_json(tmp_path / "empty.json").read_text()) == []


def test_save_json_round_trip(tmp_path: Path) -> None:
    evaluator = CocoEvaluator.from_records(tiny_dataset(), ["cat", "dog", "bird"])
    evaluator.add(1, torch.tensor([[10.0, 20.0, 50.0, 60.0, 0.123456789, 1.0]]))
    saved = json.loads(evaluator.save_json(tmp_path / "out" / "predictions.json").read_text())
    assert saved == [{"image_id": 1, "category_id": 2, "bbox": [10.0, 20.0, 40.0, 40.0], "score": 0.12346}]


def test_pycocotools_prints_nothing(capsys) -> None:
    evaluator = CocoEvaluator.from_records(tiny_dataset(), ["cat", "dog", "bird"])
    for image_id, rows in perfect_detections(tiny_dataset()).items():
        evaluator.add(image_id, rows)
    evaluator.evaluate()
    assert capsys.readouterr().out == ""


def test_bad_inputs_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        CocoEvaluator.from_coco_json(tmp_path / "missing.json")
    with pytest.raises(UserError, match="unknown evaluator backend"):
        CocoEvaluator.from_records(tiny_dataset(), ["cat", "dog"], backend="detectron")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_json_without_area_or_iscrowd_is_scored(tmp_path: Path, backend: str) -> None:
    """label-studio-converter and hand-made jsons leave COCOeval's `area` and `iscrowd` out: the box's area, not crowd."""
    path = tmp_path / "bare.json"
    path.write_text(json.dumps({"images": [{"id": 1, "file_name": "a.jpg", "width": 100, "height": 80}],
                                "categories": [{"id": 3, "name": "cat"}],
                                "annotations": [{"id": 1, "image_id": 1, "category_id": 3, "bbox": [10, 10, 50, 40]},
                                                {"id": 2, "image_id": 1, "category_id": 3, "bbox": [60, 5, 30, 30]}]}))
    evaluator = CocoEvaluator.from_coco_json(path, backend=backend)
    evaluator.add(1, np.array([[10.0, 10, 60, 50, 0.9, 0]]))
    metrics = evaluator.evaluate()
    assert metrics.map50 == pytest.approx(0.5, abs=0.01) and metrics.class_instances == (2,)


def test_image_subset_and_unknown_images() -> None:
    records = tiny_dataset()
    evaluator = CocoEvaluator.from_records(records, ["cat", "dog", "bird"])
    evaluator.add(1, perfect_detections(records)[1])  # image 2 gets nothing
    subset = evaluator.evaluate(image_ids=[1])
    assert subset.map50 == pytest.approx(1.0) and subset.class_instances == (1, 1, 0)
    everything = evaluator.evaluate()
    assert everything.map50 < 1.0 and everything.class_instances == (1, 2, 0)
    evaluator.add(99, torch.tensor([[0.0, 0, 5, 5, 0.5, 0]]))
    with pytest.raises(UserError, match="not in the ground truth: \\[99\\]"):
        evaluator.evaluate()
    evaluator.reset()
    assert evaluator.results() == [] and evaluator.evaluate().map50 == 0.0


def test_auto_is_faster_coco_eval_when_installed_else_pycocotools(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = importlib.util.find_spec("faster_coco_eval") is not None
    evaluator = CocoEvaluator.from_records(tiny_dataset(), ["cat", "dog", "bird"])
    assert evaluator.backend == ("faster-coco-eval" if installed else "pycocotools")
    with monkeypatch.context() as patch:
        patch.setattr("detect.evaluation.evaluator.importlib.util.find_spec", lambda name: None)
        assert CocoEvaluator.from_records(tiny_dataset(), ["cat", "dog", "bird"]).backend == "pycocotools"
    assert CocoEvaluator.from_records(tiny_dataset(), ["cat", "dog", "bird"], "pycocotools").backend == "pycocotools"


@pytest.mark.skipif(len(BACKENDS) < 2, reason="faster-coco-eval is not installed")
def test_both_backends_give_the_same_stats_on_many_noisy_detections() -> None:
    rng = np.random.default_rng(0)
    records = []
    for image_id in range(1, 41):
        count = int(rng.integers(0, 9))
        boxes = np.c_[rng.uniform(0.2, 0.8, (count, 2)), rng.uniform(0.02, 0.4, (count, 2))].astype(np.float32)
        records.append(ImageRecord(Path(f"{image_id}.jpg"), image_id, 160, 120, rng.integers(0, 5, count), boxes,
                                   rng.random(count) < 0.1))
    names = [f"class{index}" for index in range(5)]
    detections = {}
    for image_id, rows in perfect_detections(records).items():
        noisy = rows.numpy() + np.r_[rng.normal(0, 3, 4), 0, 0] * np.ones((len(rows), 1))
        extra = np.c_[rng.uniform(0, 80, (60, 2)), rng.uniform(80, 160, (60, 2)), rng.random(60), rng.integers(0, 5, 60)]
        detections[image_id] = np.concatenate([noisy, extra])
    found = {}
    for backend in BACKENDS:
        evaluator = CocoEvaluator.from_records(records, names, backend)
        for image_id, rows in detections.items():
            evaluator.add(image_id, rows)
        found[backend] = evaluator.evaluate().stats
    np.testing.assert_allclose(found["pycocotools"], found["faster-coco-eval"], atol=1e-4)


def noisy_scores(class_count: int, backend: str) -> dict:
    """The shifted tiny dataset with `class_count` class names, a detection of class 2 (no ground truth) added:
    its stats and per-class numbers as plain values."""
    evaluator = shifted_evaluator(backend, [f"class{index}" for index in range(class_count)])
    evaluator.add(1, torch.tensor([[10.0, 10.0, 50.0, 50.0, 0.8, 2.0]]))
    metrics = evaluator.evaluate()
    return {"stats": list(metrics.stats), "p": metrics.precision, "r": metrics.recall,
            "ap": [metrics.class_ap50_95[k] for k in range(3)], "curves": list(metrics.precision_curves.shape),
            "classes": len(metrics.class_ap50), "absent": metrics.class_ap50[class_count - 1]}


MANY_CLASSES = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_DATA, (int(1.5 * 2**30),) * 2)
from tests.evaluation.test_evaluator import noisy_scores
print(json.dumps(noisy_scores(20_000, sys.argv[1])))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_20000_classes_are_scored_in_the_memory_of_the_classes_present(backend: str) -> None:
    """COCOeval's arrays take 97 KB a category (1.9 GB for 20,000): only those with ground truth are scored, which
    gives the same stats; under a 1.5 GB cap."""
    done = subprocess.run([sys.executable, "-c", MANY_CLASSES, backend], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2], check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    many, few = json.loads(done.stdout), noisy_scores(3, backend)
    assert many["stats"] == few["stats"] and many["ap"][:2] == few["ap"][:2] and (many["p"], many["r"]) == (few["p"], few["r"])
    assert math.isnan(many["ap"][2]) and math.isnan(many["absent"])
    assert many["curves"] == [20_000, 101] and many["classes"] == 20_000
