"""`python -m detect.val` end to end: the official yolov5n weights on coco128 give the published COCO mAP; --task
speed and study, an ensemble of several --weights, --augment."""

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from detect import val
from detect.data.categories import COCO_NAMES
from detect.evaluation import scoring, val_loop
from detect.inference import predictor as inference_predictor
from detect.models import build_model
from detect.models.safe_io import save_checkpoint
from detect.models.stored import TrainedWith
from detect.models.weights import model_state
from detect.ops.nms import non_max_suppression
from tests.data.helpers import write_sample, write_yaml
from tests.shared_data import COCO128, COCO128_JSON, YOLOV5N, needs_shared


def bare_pycocotools_stats(ground_truth: Path, predictions: Path) -> list[float]:
    """The 12 bbox stats of plain pycocotools, given only the two files (what a user of --save-json does)."""
    truth = COCO(str(ground_truth))
    coco_eval = COCOeval(truth, truth.loadRes(str(predictions)), "bbox")
    coco_eval.evaluate()
    coco_eval.accumulate()
    coco_eval.summarize()
    return list(coco_eval.stats)


@pytest.mark.slow
@needs_shared
def test_yolov5n_on_coco128_yolo_labels_save_json_scores_with_official_ids(tmp_path):
    # coco128 as ultralytics ships it: YOLO txt labels, COCO's 80 names, no json. --save-json must still write
    # COCO's category ids (the 80 -> 91 map), so the file scores against the official json without remapping.
    data = tmp_path / "coco128.yaml"
    data.write_text(yaml.safe_dump({"path": str(COCO128), "train": "images/train2017", "val": "images/train2017",
                                    "names": list(COCO_NAMES)}))
    # batch 16: the reference detections were made with rect batches of 16 (expected_metrics.json)
    args = val.parse_args(["--weights", str(YOLOV5N), "--data", str(data), "--imgsz", "640", "--device", "cpu",
                           "--batch-size", "16", "--project", str(tmp_path), "--no-progress", "--save-json"])
    result = val.validate(args)
    assert result.images == 128 and result.problems == ()
    run = tmp_path / "exp"
    official = bare_pycocotools_stats(COCO128_JSON, run / "predictions.json")
    # pycocotools against instances_train2017.json: AP 0.3703, AP50 0.5766 (expected_metrics.json)
    assert official[0] == pytest.approx(0.370, abs=0.003) and official[1] == pytest.approx(0.577, abs=0.003)
    # Our own score is against the txt labels (no crowd regions); ground_truth.json reproduces it, up to the
    # rounding of the saved boxes (3 decimals) and scores (5 decimals).
    ours = bare_pycocotools_stats(run / "ground_truth.json", run / "predictions.json")
    np.testing.assert_allclose(ours, result.metrics.stats, rtol=0, atol=1e-4)
    assert result.metrics.map50_95 == pytest.approx(official[0], abs=0.02)


@pytest.mark.slow
def test_yolov5n_ensembled_with_itself_scores_yolov5ns_map_on_coco128(coco128_workdir, monkeypatch, caplog):
    # Issue 38's check, with the tutorial's command (`val.py --weights a.pt b.pt --data coco128.yaml --img 320
    # --half`): the members' scores are the ones validate_ensemble prints beside the ensemble's.
    members = []
    score = val.score
    monkeypatch.setattr(val, "score", lambda *args: members.append(score(*args)) or members[-1])
    with caplog.at_level(logging.INFO, logger="detect"):
        ensemble = val.run(weights=[str(YOLOV5N), str(YOLOV5N)], data="coco128.yaml", imgsz=320, half=True,
                           device="cpu", progress=False)
    assert ensemble.images == 128 and len(members) == 2
    np.testing.assert_allclose(ensemble.metrics.stats, members[0].metrics.stats, rtol=0, atol=1e-4)
    assert ensemble.metrics.map50_95 > 0.25  # yolov5n at 320: 0.293 here
    assert any(record.message.startswith("ensemble against its members:") for record in caplog.records)


@pytest.fixture
def tiny_run(tmp_path):
    """A 3-class dataset of four images and an untrained checkpoint for it."""
    root = tmp_path / "data"
    for index in range(4):
        write_sample(root, "train", f"im{index}", 96, 128, [(10, 10, 60, 50), (70, 20, 120, 90)])
    data = write_yaml(root)
    weights = save_checkpoint(tmp_path / "w.pt", {"model": model_state(build_model("yolov5n.yaml", num_classes=3))})
    return tmp_path, data, weights


def test_cli_writes_outputs_and_reports(tiny_run, capsys):
    tmp_path, data, weights = tiny_run
    code = val.main(["--weights", str(weights), "--data", str(data), "--imgsz", "128", "--device", "cpu",
                     "--workers", "0", "--project", str(tmp_path / "runs"), "--no-progress",
                     "--save-txt", "--save-json", "--plots", "--verbose", "--conf-thres", "0.0001"])
    assert code == 0
    run = tmp_path / "runs" / "exp"
    assert sorted(p.name for p in (run / "labels").iterdir()) == [f"im{i}.txt" for i in range(4)]
    assert (run / "confusion_matrix.png").stat().st_size > 0 and (run / "PR_curve.png").stat().st_size > 0
    # Not a COCO dataset: class k is category k + 1, and the ground truth it was scored against is written too.
    predictions = json.loads((run / "predictions.json").read_text())
    truth = json.loads((run / "ground_truth.json").read_text())
    assert {r["category_id"] for r in predictions} <= {1, 2, 3} and len(predictions) > 0
    assert [c["id"] for c in truth["categories"]] == [1, 2, 3] and len(truth["annotations"]) == 8


@pytest.mark.parametrize("record, extra, said", [
    (TrainedWith(96, "elsewhere.yaml"), {}, "at 96 px, the size the model was trained at"),
    (TrainedWith(96), {"imgsz": 64}, "at 64 px, as given"),
    (TrainedWith(), {}, "at 640 px, the default: the model's file records no size"),
])
def test_the_size_is_the_checkpoints_unless_given_and_the_data_and_size_are_printed(tiny_run, caplog, record, extra,
                                                                                     said):
    tmp_path, data, _ = tiny_run
    model = build_model("yolov5n.yaml", num_classes=3)
    weights = save_checkpoint(tmp_path / "trained.pt", {"model": model_state(model, record)})
    with caplog.at_level(logging.INFO, logger="detect"):
        val.run(weights=str(weights), data=str(data), device="cpu", workers=0, progress=False,
                project=str(tmp_path / "runs"), **extra)
    side = said.split()[1]
    assert f"{weights} on {data} (val split) {said}" in caplog.messages
    assert any(message.startswith(f"{data}, val split: 4 images at {side} px\n") for message in caplog.messages)


def test_sliced_val_says_how_many_windows_the_images_took(tiny_run, caplog):
    tmp_path, data, weights = tiny_run
    with caplog.at_level(logging.INFO, logger="detect"):
        result = val.run(weights=str(weights), data=str(data), slice=64, device="cpu", workers=0, progress=False,
                         project=str(tmp_path / "runs"), conf_thres=0.0001)
    assert result.images == 4  # 128x96 images: 3 x 2 windows of 64 px each at overlap 0.2
    assert (f"{weights} on {data} (val split) in windows of 64 px, overlap 0.2: 6 to 6 an image, 24 in all "
            "(--max-det caps each window's detections)") in caplog.messages
    assert any(message.startswith(f"{data}, val split: 4 images in windows of 64 px\n") for message in caplog.messages)


@pytest.mark.parametrize("extra, message", [(["--device", "tpu"], "device 'tpu' is not valid")])
def test_user_errors_are_one_line_and_exit_2(tiny_run, capsys, extra, message):
    tmp_path, data, weights = tiny_run
    argv = ["--weights", str(weights), "--data", str(data), "--device", "cpu", "--project", str(tmp_path)]
    assert val.main(argv + extra) == 2
    assert message in capsys.readouterr().err


def test_half_on_the_cpu_evaluates_in_fp32_with_one_warning(tiny_run, caplog):
    """The TTA tutorial's `val.py --weights ... --img 832 --augment --half`, sizes shrunk: on the CPU yolov5 runs it
    in fp32; so do we, with one warning."""
    tmp_path, data, weights = tiny_run
    argv = ["--weights", str(weights), "--data", str(data), "--img", "128", "--augment", "--device", "cpu",
            "--workers", "0", "--conf-thres", "0.0001", "--no-progress", "--project", str(tmp_path / "runs")]
    with caplog.at_level(logging.WARNING, logger="detect"):
        assert val.main([*argv, "--half"]) == 0
    assert [r.message for r in caplog.records if "--half" in r.message] == [
        "--half: fp16 needs an accelerator; evaluating in fp32 on the CPU (as yolov5 does)"]
    (half,), (full,) = val.run_tasks(val.parse_args([*argv, "--half"])), val.run_tasks(val.parse_args(argv))
    assert half.metrics.stats == full.metrics.stats and half.images == full.images == 4


def test_class_count_mismatch_is_a_user_error(tiny_run, capsys):
    tmp_path, data, _ = tiny_run
    weights = save_checkpoint(tmp_path / "w80.pt", {"model": model_state(build_model("yolov5n.yaml"))})
    assert val.main(["--weights", str(weights), "--data", str(data), "--device", "cpu", "--workers", "0",
                     "--project", str(tmp_path)]) == 2
    assert "80 classes" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value, message", [
    ("--imgsz", "-5", "argument --imgsz: must be an integer in [1, 8192], got '-5'"),
    ("--batch-size", "0", "argument --batch-size: must be a positive integer, got '0'"),
    ("--workers", "-1", "argument --workers: must be an integer >= 0, got '-1'"),
    ("--conf-thres", "2", "argument --conf-thres: must be a number in [0, 1], got '2'"),
    ("--iou-thres", "1.5", "argument --iou-thres: must be a number in [0, 1], got '1.5'"),
    ("--max-det", "0", "argument --max-det: must be a positive integer, got '0'"),
    ("--imgsz", "big", "argument --imgsz: must be an integer in [1, 8192], got 'big'"),
])
def test_out_of_range_flags_stop_before_any_work(capsys, monkeypatch, flag, value, message):
    monkeypatch.setattr(val, "run", lambda args: pytest.fail("ran with a bad flag"))
    with pytest.raises(SystemExit) as stopped:
        val.main(["--weights", "any.pt", flag, value])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_speed_times_each_stage_at_yolov5s_thresholds_and_scores_nothing(tiny_run, monkeypatch, caplog):
    tmp_path, data, weights = tiny_run
    thresholds = []

    def recording_nms(decoded, conf_threshold, iou_threshold, **options):
        thresholds.append((conf_threshold, iou_threshold))
        return non_max_suppression(decoded, conf_threshold, iou_threshold, **options)

    monkeypatch.setattr(inference_predictor, "non_max_suppression", recording_nms)
    monkeypatch.setattr(val_loop.CocoEvaluator, "evaluate", lambda *args, **kwargs: pytest.fail("speed scored mAP"))
    with caplog.at_level(logging.INFO):
        # the flags' thresholds (validation's 0.001 / 0.6 or any other) do not apply to the speed run
        speed = val.run(weights=str(weights), data=str(data), task="speed", imgsz=64, device="cpu", workers=0,
                        conf_thres=0.001, iou_thres=0.7, project=str(tmp_path / "runs"), progress=False)
    assert thresholds and set(thresholds) == {(0.25, 0.45)}
    assert min(speed.preprocess, speed.inference, speed.nms) > 0
    line = next(record.message for record in caplog.records if "inference" in record.message)
    assert re.search(r"w\.pt: 4 images, Speed: [\d.]+ ms pre-process, [\d.]+ ms inference, [\d.]+ ms NMS per image "
                     r"at shape \(32, 3, 64, 64\), conf 0\.25, IoU 0\.45", line), line
    assert not (tmp_path / "runs").exists() and "mAP" not in caplog.text


def test_study_of_two_weights_writes_their_txt_files_and_the_plot(tiny_run):
    tmp_path, data, weights = tiny_run
    other = save_checkpoint(tmp_path / "other.pt", {"model": model_state(build_model("yolov5n.yaml", num_classes=3))})
    code = val.main(["--task", "study", "--weights", str(weights), str(other), "--data", str(data), "--study-sizes",
                     "64", "96", "--device", "cpu", "--workers", "0", "--project", str(tmp_path / "runs"),
                     "--no-progress"])
    assert code == 0
    run = tmp_path / "runs" / "exp"
    assert sorted(path.name for path in run.iterdir()) == ["study.png", "study_data_other.txt", "study_data_w.txt"]
    table = np.loadtxt(run / "study_data_w.txt", ndmin=2)
    assert table.shape == (2, 11) and table[:, 10].tolist() == [64, 96]  # P R mAP50 mAP 3 losses 3 times imgsz
    assert np.all((0 <= table[:, :4]) & (table[:, :4] <= 1)) and np.all(table[:, 8] > 0)


def test_an_ensemble_of_a_checkpoint_with_itself_scores_as_the_checkpoint_in_one_run_folder(tiny_run):
    tmp_path, data, weights = tiny_run
    copy = tmp_path / "copy.pt"
    copy.write_bytes(weights.read_bytes())
    alone, ensemble = (val.run(weights=each, data=str(data), imgsz=64, device="cpu", workers=0, progress=False,
                               project=str(tmp_path / "runs"), name=name, conf_thres=0.0001)
                       for each, name in ((str(weights), "alone"), ([str(weights), str(copy)], "ensemble")))
    assert ensemble.images == 4 and ensemble.metrics.stats == alone.metrics.stats
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == ["alone", "ensemble"]


def test_the_tutorials_ensemble_command_scores_once_beside_each_member(tiny_run, caplog, capsys):
    """The ensembling tutorial's `val.py --weights yolov5x.pt yolov5l6.pt --data coco.yaml --img 640 --half`, sizes
    shrunk: two different checkpoints, one ensemble score printed above each member's; an export is refused."""
    tmp_path, data, weights = tiny_run
    torch.manual_seed(1)
    other = save_checkpoint(tmp_path / "other.pt", {"model": model_state(build_model("yolov5n.yaml", num_classes=3))})
    argv = ["--weights", str(weights), str(other), "--data", str(data), "--img", "64", "--half", "--device", "cpu",
            "--workers", "0", "--conf-thres", "0.0001", "--project", str(tmp_path / "runs"), "--no-progress"]
    with caplog.at_level(logging.INFO, logger="detect"):
        assert val.main(argv) == 0
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == ["exp"]
    messages = [record.message for record in caplog.records]
    assert sum(message.startswith("ensemble of 2 models") for message in messages) == 1
    table = next(message for message in messages if message.startswith("ensemble against its members:"))
    rows = [line.split() for line in table.splitlines()[2:]]
    assert [row[2] for row in rows] == ["ensemble", str(weights), str(other)]
    assert all(0 <= float(value) <= 1 for row in rows for value in row[:2])
    assert val.main([*argv[:2], "model.onnx", *argv[3:]]) == 2
    assert capsys.readouterr().err.startswith("error: an ensemble runs PyTorch weights (.pt) only")


def test_augment_runs_end_to_end_and_an_export_is_refused(tiny_run, capsys, monkeypatch):
    tmp_path, data, weights = tiny_run
    plain, augmented = (val.run(weights=str(weights), data=str(data), imgsz=64, device="cpu", workers=0,
                                augment=augment, project=str(tmp_path / "runs"), progress=False, conf_thres=0.0001)
                        for augment in (False, True))
    assert augmented.images == 4 and augmented.metrics.stats != plain.metrics.stats
    monkeypatch.setattr(scoring, "load_inference_model", lambda *args: OnnxStandIn())
    assert val.main(["--weights", "model.onnx", "--data", str(data), "--augment", "--device", "cpu"]) == 2
    assert capsys.readouterr().err.startswith("error: --augment runs PyTorch weights (.pt) only")


class OnnxStandIn:
    """What val sees of an exported model (OnnxInference): no PyTorch model behind it."""

    names, stride, fixed_shape = ("a", "b", "c"), 32, None


def test_cache_dir_holds_the_label_cache(tiny_run):
    tmp_path, data, weights = tiny_run
    code = val.main(["--weights", str(weights), "--data", str(data), "--imgsz", "64", "--device", "cpu", "--workers",
                     "0", "--project", str(tmp_path / "runs"), "--no-progress", "--cache-dir", str(tmp_path / "caches")])
    assert code == 0
    assert len(list((tmp_path / "caches").glob("train-*.detect.cache"))) == 1
    assert not list((tmp_path / "data").rglob("*.detect.cache"))
