"""The done-when check of the label formats: coco128's .txt labels written as a COCO json, a VOC folder, a Label
Studio export and a CVAT xml give the imported yolov5n.pt the mAP the .txt labels give (VOC's integer pixels: within
0.005), and a 1-epoch training runs on each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from detect import train, val
from detect.data import load_data_config, load_split
from detect.data.categories import COCO_NAMES
from detect.evaluation.evaluator import CocoEvaluator
from tests.data.annotations.exports import FORMATS, write_format
from tests.shared_data import COCO128, YOLOV5N, needs_shared

pytestmark = [needs_shared, pytest.mark.slow]
SCORE = {"imgsz": 320, "device": "cpu", "workers": 0, "progress": False, "plots": False}
TINY_MODEL = Path(__file__).parents[2] / "training" / "fixtures" / "tiny.yaml"  # three convolutions and a head
TOLERANCE = {"coco": 1e-4, "voc": 0.005, "label-studio": 1e-4, "cvat": 1e-4}


def _yaml(path: Path, split: object) -> Path:
    path.write_text(yaml.safe_dump({"path": str(COCO128), "train": split, "val": split, "names": list(COCO_NAMES)}))
    return path


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """txt.yaml (coco128's .txt labels) and <format>.yaml, each reading the same labels written in that format."""
    folder = tmp_path_factory.mktemp("formats")
    records = load_split(load_data_config(_yaml(folder / "txt.yaml", "images/train2017")), "val").records
    for name in FORMATS:
        target = write_format(name, records, COCO_NAMES, folder / name)
        _yaml(folder / f"{name}.yaml", {"annotations": str(target), "images": "images/train2017"})
    return folder


def test_each_format_scores_yolov5n_as_the_txt_labels(written: Path, capsys) -> None:
    reference = val.run(weights=str(YOLOV5N), data=str(written / "txt.yaml"), save_json=True,
                        project=str(written / "runs"), name="txt", **SCORE)
    scores = {"txt": (reference.metrics.map50_95, reference.metrics.map50)}
    # Each format gives the val loop the same images at the same sizes as the .txt labels, so the same detections
    # (yolov5n's, scored once): each format scores them against its own ground truth (a COCO json: the json, with its
    # own image and category ids). The 1-epoch trainings below run val end to end on each format.
    detections = json.loads((written / "runs" / "txt" / "predictions.json").read_text())
    txt_split = load_split(load_data_config(written / "txt.yaml"), "val")
    txt, txt_categories = txt_split.records, CocoEvaluator.for_split(txt_split).category_ids
    for name in FORMATS:
        split = load_split(load_data_config(written / f"{name}.yaml"), "val")
        assert [(record.path, record.width, record.height) for record in split.records] == \
            [(record.path, record.width, record.height) for record in txt]
        image_id = dict(zip(txt.image_ids.tolist(), split.records.image_ids.tolist()))
        evaluator = CocoEvaluator.for_split(split)
        category_id = dict(zip(txt_categories, evaluator.category_ids))
        evaluator.add_coco_results({**row, "image_id": image_id[row["image_id"]],
                                    "category_id": category_id[row["category_id"]]} for row in detections)
        metrics = evaluator.evaluate()
        scores[name] = (metrics.map50_95, metrics.map50)
    with capsys.disabled():
        print("\nyolov5n.pt on coco128 at 320, mAP50-95 / mAP50: " +
              ", ".join(f"{name} {both[0]:.5f} / {both[1]:.5f}" for name, both in scores.items()))
    assert 0.25 < scores["txt"][0] < 0.35  # yolov5n at 320: a real score, not an empty one
    for name in FORMATS:
        assert abs(scores[name][0] - scores["txt"][0]) <= TOLERANCE[name], name
        assert abs(scores[name][1] - scores["txt"][1]) <= TOLERANCE[name], name


def test_a_one_epoch_training_runs_on_each_format(tmp_path: Path) -> None:
    few = load_split(load_data_config(_yaml(tmp_path / "txt.yaml", "images/train2017")), "val").records.take(range(8))
    (tmp_path / "images.txt").write_text("".join(f"{record.path}\n" for record in few))
    for name in FORMATS:
        target = write_format(name, few, COCO_NAMES, tmp_path / name)
        data = _yaml(tmp_path / f"{name}.yaml", {"annotations": str(target), "images": str(tmp_path / "images.txt")})
        result = train.run(cfg=str(TINY_MODEL), data=str(data), imgsz=32, batch_size=4, epochs=1, workers=0,
                           device="cpu", progress=False, noplots=True, project=str(tmp_path / "runs"), name=name)
        assert result.last.is_file() and result.metrics is not None, name
