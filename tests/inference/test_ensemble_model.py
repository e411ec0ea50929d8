"""yolov5's model ensembling (runtimes/ensemble_model.py): several .pt files as one model whose decoded rows meet in
one NMS, through the Detector API and `python -m detect.predict --weights a b`."""

import logging

import cv2
import numpy as np
import pytest
import torch

from detect import predict
from detect.backend import select
from detect.errors import UserError
from detect.inference.detector import Detector, PredictSettings
from detect.inference.model import load_inference_model
from detect.inference.runtimes.ensemble_model import EnsembleInference
from detect.inference.tta import augment_model
from detect.models import build_model
from detect.models.safe_io import save_checkpoint
from detect.models.weights import model_state

NAMES = ["cat", "dog", "bird"]


def checkpoint(path, seed, cfg="yolov5n.yaml", names=NAMES):
    torch.manual_seed(seed)
    model = build_model(cfg, num_classes=len(names), names=names)
    return save_checkpoint(path, {"model": model_state(model)})


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two different untrained 3-class checkpoints with the same names."""
    folder = tmp_path_factory.mktemp("ensemble")
    return checkpoint(folder / "a.pt", 0), checkpoint(folder / "b.pt", 1)


def test_the_ensemble_joins_each_members_rows_and_takes_the_largest_stride(pair, tmp_path):
    p6 = checkpoint(tmp_path / "p6.pt", 2, cfg="yolov5n6.yaml")
    backend = select("cpu", amp=False)
    ensemble = load_inference_model([pair[0], p6], backend)
    members = [load_inference_model(path, backend) for path in (pair[0], p6)]
    assert isinstance(ensemble, EnsembleInference) and ensemble.stride == 64 and ensemble.names == tuple(NAMES)
    images = torch.rand(1, 3, 64, 64)
    torch.testing.assert_close(ensemble(images), torch.cat([member(images) for member in members], dim=1))


def test_augment_runs_each_member_augmented_then_joins_them(pair):
    backend = select("cpu", amp=False)
    images = torch.rand(1, 3, 64, 64)
    alone = augment_model(load_inference_model(pair[0], backend))(images)
    twice = augment_model(load_inference_model([pair[0], pair[0]], backend))(images)
    torch.testing.assert_close(twice, torch.cat((alone, alone), dim=1))


def test_an_ensemble_of_a_model_with_itself_detects_what_the_model_does(pair):
    image = np.random.default_rng(0).integers(0, 255, (80, 120, 3), dtype=np.uint8)
    settings = PredictSettings(imgsz=(96, 96), conf_threshold=0.001, max_det=50)
    alone, twice = (Detector(weights, "cpu", settings)(image)[0] for weights in (pair[0], [pair[0], pair[0]]))
    torch.testing.assert_close(twice.rows, alone.rows)
    both = Detector(list(pair), "cpu", settings)(image)[0]
    assert both.names == tuple(NAMES) and not torch.equal(both.rows, alone.rows)


def test_members_with_other_classes_or_an_export_are_refused_in_one_line(pair, tmp_path):
    backend = select("cpu", amp=False)
    other = checkpoint(tmp_path / "other.pt", 0, names=["cat", "dog", "cow"])
    with pytest.raises(UserError) as refused:
        load_inference_model([pair[0], other], backend)
    assert str(refused.value) == (f"an ensemble's models must predict the same classes: {pair[0]} has 3 classes (cat, "
                                  f"dog, bird), {other} has 3 classes (cat, dog, cow)")
    with pytest.raises(UserError, match=r"^an ensemble runs PyTorch weights \(.pt\) only, not the export m.onnx"):
        load_inference_model([pair[0], "m.onnx"], backend)


def test_the_tutorials_predict_command_gives_one_result_and_names_its_members(pair, tmp_path, caplog):
    """The ensembling tutorial's `detect.py --weights yolov5x.pt yolov5l6.pt --img 640 --source data/images`, sizes
    shrunk: one run folder, every image once, and the log says what was combined."""
    source = tmp_path / "images"
    source.mkdir()
    for index in range(2):
        cv2.imwrite(str(source / f"{index}.jpg"), np.full((64, 96, 3), 40 * index, np.uint8))
    argv = ["--weights", str(pair[0]), str(pair[1]), "--img", "96", "--source", str(source), "--device", "cpu",
            "--conf-thres", "0.001", "--save-txt", "--project", str(tmp_path / "runs")]
    with caplog.at_level(logging.INFO, logger="detect"):
        assert predict.main(argv) == 0
    run = tmp_path / "runs" / "exp"
    assert sorted(path.name for path in (run / "labels").iterdir()) == ["0.txt", "1.txt"]
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == ["exp"]
    combined = next(record.message for record in caplog.records if record.message.startswith("ensemble of 2"))
    assert f"{pair[0]}: depth 0.33, width 0.25, stride 32, " in combined and f"{pair[1]}: depth" in combined
