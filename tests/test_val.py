"""`python -m detect.val` end to end: the official yolov5n weights on coco128 give the published COCO mAP."""

from pathlib import Path

import pytest

from detect import val
from detect.engine.checkpoint import save_checkpoint
from detect.engine.weights import model_state
from detect.models import build_model
from tests.data.helpers import write_sample, write_yaml

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
YOLOV5N = SHARED / "weights" / "yolov5n.pt"
COCO128 = SHARED / "data" / "coco128"


@pytest.mark.slow
@pytest.mark.skipif(not (YOLOV5N.is_file() and COCO128.is_dir()), reason=f"shared weights or coco128 absent: {SHARED}")
def test_yolov5n_on_coco128_matches_pycocotools_reference(tmp_path, monkeypatch):
    # configs/data/coco128.yaml finds ../shared from the repo root, as a user running from a checkout would.
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    # batch 16: the reference detections were made with rect batches of 16 (expected_metrics.json)
    args = val.parse_args(["--weights", str(YOLOV5N), "--data", "coco128.yaml", "--imgsz", "640", "--device", "cpu",
                           "--batch-size", "16", "--project", str(tmp_path), "--no-progress", "--save-json"])
    result = val.run(args)
    assert result.images == 128
    # pycocotools against instances_train2017.json: AP 0.3703, AP50 0.5766 (expected_metrics.json)
    assert result.metrics.map50_95 == pytest.approx(0.370, abs=0.003)
    assert result.metrics.map50 == pytest.approx(0.577, abs=0.003)
    assert (tmp_path / "exp" / "predictions.json").stat().st_size > 100_000


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
    assert (run / "predictions.json").is_file()
    assert (run / "confusion_matrix.png").stat().st_size > 0 and (run / "PR_curve.png").stat().st_size > 0


@pytest.mark.parametrize("extra, message", [(["--half"], "--half needs an accelerator"),
                                             (["--device", "tpu"], "device 'tpu' is not valid")])
def test_user_errors_are_one_line_and_exit_2(tiny_run, capsys, extra, message):
    tmp_path, data, weights = tiny_run
    argv = ["--weights", str(weights), "--data", str(data), "--device", "cpu", "--project", str(tmp_path)]
    assert val.main(argv + extra) == 2
    assert message in capsys.readouterr().err


def test_class_count_mismatch_is_a_user_error(tiny_run, capsys):
    tmp_path, data, _ = tiny_run
    weights = save_checkpoint(tmp_path / "w80.pt", {"model": model_state(build_model("yolov5n.yaml"))})
    assert val.main(["--weights", str(weights), "--data", str(data), "--device", "cpu", "--workers", "0",
                     "--project", str(tmp_path)]) == 2
    assert "80 classes" in capsys.readouterr().err
