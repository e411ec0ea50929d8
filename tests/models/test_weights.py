"""Loading models from weights: our checkpoints round-trip; ultralytics/yolov5 .pt files import exactly."""

import math
import os
from pathlib import Path

import pytest
import torch

from detect.errors import UserError
from detect.models import build_model, safe_io
from detect.models.safe_io import read_yolov5_checkpoint, save_checkpoint
from detect.models.stored import TrainedWith
from detect.models.weights import load_model, model_state
from tests.models.yolov5_standins import standin_checkpoint
from tests.shared_data import YOLOV5N, needs_shared


def test_our_checkpoint_round_trips(tmp_path):
    torch.manual_seed(0)
    model = build_model("yolov5n.yaml", num_classes=3, names=["a", "b", "c"]).eval()
    path = save_checkpoint(tmp_path / "last.pt", {"model": model_state(model), "epoch": 4})
    loaded = load_model(path)
    assert loaded.names == ["a", "b", "c"] and not loaded.training
    images = torch.rand(1, 3, 128, 160)
    with torch.no_grad():
        torch.testing.assert_close(loaded.predict(images), model.predict(images))


def test_reading_weights_leaves_the_global_rng_where_it_was(tmp_path):
    # a fine-tuning run seeds, reads its weights, then builds its own head: the same draws as with no weights read
    path = save_checkpoint(tmp_path / "best.pt", {"model": model_state(build_model("yolov5n.yaml", num_classes=3))})
    torch.manual_seed(0)
    load_model(path)
    after_reading = torch.rand(4)
    torch.manual_seed(0)
    torch.testing.assert_close(after_reading, torch.rand(4), rtol=0, atol=0)


def test_a_checkpoint_keeps_the_size_and_data_it_was_trained_with(tmp_path):
    model = build_model("yolov5n.yaml", num_classes=3)
    trained = TrainedWith(96, "data/shapes.yaml")
    path = save_checkpoint(tmp_path / "best.pt", {"model": model_state(model, trained)})
    loaded = load_model(path)
    assert loaded.trained == trained
    assert load_model(save_checkpoint(tmp_path / "again.pt", {"model": model_state(loaded)})).trained == trained
    assert load_model(save_checkpoint(tmp_path / "bare.pt", {"model": model_state(model)})).trained == TrainedWith()


@pytest.mark.parametrize("record", [{"imgsz": "640"}, {"imgsz": 0}, {"imgsz": 96, "data": 3}, [96, "a.yaml"]])
def test_a_record_of_the_training_that_is_not_a_size_and_a_yaml_is_one_line(tmp_path, record):
    state = {**model_state(build_model("yolov5n.yaml", num_classes=3)), "trained": record}
    path = save_checkpoint(tmp_path / "odd.pt", {"model": state})
    with pytest.raises(UserError, match=r"odd\.pt: its record of the training .* is not an image size \(an integer "
                                        r"in \[1, 8192\]\) and a data yaml$"):
        load_model(path)


@pytest.mark.parametrize("version, trained", [("v7.0", TrainedWith(640, "data/custom.yaml")),
                                              ("v6.2", TrainedWith(640, "data/custom.yaml")),
                                              ("v6.0", TrainedWith())])  # no "opt" before v6.2, nor in its releases
def test_a_yolov5_checkpoint_gives_the_size_and_data_of_its_opt(tmp_path, version, trained):
    standin_checkpoint(tmp_path / "yolov5.pt", version, stripped=True)
    assert load_model(tmp_path / "yolov5.pt").trained == trained


def test_missing_weights_name_where_to_put_them():
    with pytest.raises(UserError, match="weights not found: nothing.pt .*weights"):
        load_model("nothing.pt")


def test_a_checkpoint_without_a_model_is_refused(tmp_path):
    path = save_checkpoint(tmp_path / "empty.pt", {"epoch": 1})
    with pytest.raises(UserError, match="without a model"):
        load_model(path)


@needs_shared
def test_yolov5n_imports_onto_our_model_tensor_for_tensor():
    model = load_model(YOLOV5N)
    raw = read_yolov5_checkpoint(YOLOV5N).state_dict
    ours = model.state_dict()
    assert set(ours) == set(raw)
    for name, tensor in raw.items():
        assert torch.equal(ours[name], tensor.to(ours[name].dtype)), name
    assert model.nc == 80 and model.names[0] == "person" and model.stride.tolist() == [8, 16, 32]
    # the default P3 anchors, recovered in pixels from the stored grid-unit anchors
    torch.testing.assert_close(model.detect.anchors[0] * 8, torch.tensor([[10.0, 13], [16, 30], [33, 23]]))


class RunsCode:
    """Unpickling this calls os.system (what a malicious .pt does)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("zip_format", [True, False])
def test_a_code_running_pickle_is_refused_in_one_line_naming_it(tmp_path, zip_format):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    torch.save({"model": RunsCode(marker)}, path, _use_new_zipfile_serialization=zip_format)
    with pytest.raises(UserError) as refused:
        load_model(path)
    message = str(refused.value)
    assert "asks for os.system, which is not allowed" in message  # pickled as posix.system (nt.system on Windows)
    assert "\n" not in message and "--weights" not in message and "weights_only" not in message
    assert not marker.exists()


def tiny_state(names: tuple[str, ...] = ("a", "b", "c")) -> dict:
    torch.manual_seed(0)
    return model_state(build_model("yolov5n.yaml", num_classes=len(names), names=list(names)))


def test_a_tensor_that_does_not_fit_its_yaml_is_one_line_with_both_shapes(tmp_path):
    state = tiny_state()
    state["state_dict"]["model.2.cv1.conv.weight"] = torch.zeros(7, 32, 1, 1)
    with pytest.raises(UserError) as refused:
        load_model(save_checkpoint(tmp_path / "shape.pt", {"model": state}))
    assert str(refused.value) == (f"{tmp_path / 'shape.pt'}: the weights do not fit the model its yaml and 3 class "
                                  "names describe: model.2.cv1.conv.weight is (7, 32, 1, 1) in the file, (16, 32, 1, 1) "
                                  "in the model")


def test_names_that_do_not_fit_the_tensors_name_the_head_tensor(tmp_path):
    state = tiny_state()
    state["names"] = ["a", "b"]
    with pytest.raises(UserError, match=r"yaml and 2 class names describe: model\.24\.m\.0\.weight is \(24, 64, 1, 1\) "
                                        r"in the file, \(21, 64, 1, 1\) in the model$"):
        load_model(save_checkpoint(tmp_path / "names.pt", {"model": state}))


def test_a_missing_or_extra_tensor_is_named(tmp_path):
    state = tiny_state()
    state["state_dict"]["model.99.weight"] = torch.zeros(1)
    with pytest.raises(UserError, match="the model has no tensor model.99.weight$"):
        load_model(save_checkpoint(tmp_path / "extra.pt", {"model": state}))
    state = tiny_state()
    del state["state_dict"]["model.0.bn.running_var"]
    with pytest.raises(UserError, match="1 of its tensors are not in the file, the first model.0.bn.running_var$"):
        load_model(save_checkpoint(tmp_path / "missing.pt", {"model": state}))
    state = tiny_state()
    state["state_dict"]["model.0.bn.running_var"] = [1.0, 2.0]
    with pytest.raises(UserError, match="model.0.bn.running_var in its state dict is a list, not a tensor$"):
        load_model(save_checkpoint(tmp_path / "list.pt", {"model": state}))


def test_nan_or_inf_weights_are_refused_in_one_line_counting_them(tmp_path, caplog):
    state = tiny_state()
    for tensor in state["state_dict"].values():
        if tensor.is_floating_point():  # all but the 57 BatchNorm counters
            tensor.fill_(math.nan)
    with pytest.raises(UserError) as refused:
        load_model(save_checkpoint(tmp_path / "nan.pt", {"model": state}))
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'nan.pt'}: 292 of 349 tensors hold NaN or inf (the first "
                              "model.0.conv.weight)") and "\n" not in message
    state = tiny_state()
    state["state_dict"]["model.4.m.0.cv2.bn.running_var"][3] = math.inf
    path = save_checkpoint(tmp_path / "inf.pt", {"model": state})
    with pytest.raises(UserError, match=r": 1 of 349 tensors hold NaN or inf \(the first "
                                        r"model\.4\.m\.0\.cv2\.bn\.running_var\)"):
        load_model(path)
    load_model(path, refuse_nonfinite=False)  # a finished run's own best.pt is scored as it is, with a warning
    assert "1 of 349 tensors hold NaN or inf" in caplog.text


def test_yolov5_weights_that_do_not_fit_their_yaml_are_one_line(tmp_path, monkeypatch):
    standin_checkpoint(tmp_path / "v7.pt", "v7.0")
    checkpoint = read_yolov5_checkpoint(tmp_path / "v7.pt")
    checkpoint.state_dict["model.0.conv.weight"] = checkpoint.state_dict["model.0.conv.weight"][:8]
    monkeypatch.setattr(safe_io, "read_yolov5_pickle", lambda path: checkpoint)
    with pytest.raises(UserError, match=r"v7\.pt \(yolov5\): the weights do not fit the model its yaml and 3 class names "
                                        r"describe: model\.0\.conv\.weight is \(8, 3, 6, 6\) in the file, "
                                        r"\(16, 3, 6, 6\) in the model$"):
        load_model(tmp_path / "v7.pt")
    checkpoint.state_dict["model.0.conv.weight"] = torch.full((16, 3, 6, 6), math.nan)
    with pytest.raises(UserError, match=r"v7\.pt: 1 of \d+ tensors hold NaN or inf"):
        load_model(tmp_path / "v7.pt")
