"""Loading models from weights: our checkpoints round-trip; ultralytics/yolov5 .pt files import exactly."""

import os
from pathlib import Path

import pytest
import torch

from detect.errors import UserError
from detect.models import build_model
from detect.models.safe_io import save_checkpoint
from detect.models.weights import load_model, model_state
from detect.models.yolov5_pickle import read_yolov5_checkpoint

YOLOV5N = Path(__file__).resolve().parents[2].parent / "shared" / "weights" / "yolov5n.pt"
needs_yolov5n = pytest.mark.skipif(not YOLOV5N.is_file(), reason=f"official weights absent: {YOLOV5N}")


def test_our_checkpoint_round_trips(tmp_path):
    torch.manual_seed(0)
    model = build_model("yolov5n.yaml", num_classes=3, names=["a", "b", "c"]).eval()
    path = save_checkpoint(tmp_path / "last.pt", {"model": model_state(model), "epoch": 4})
    loaded = load_model(path)
    assert loaded.names == ["a", "b", "c"] and not loaded.training
    images = torch.rand(1, 3, 128, 160)
    with torch.no_grad():
        torch.testing.assert_close(loaded.predict(images), model.predict(images))


def test_missing_weights_name_where_to_put_them():
    with pytest.raises(UserError, match="weights not found: nothing.pt .*weights"):
        load_model("nothing.pt")


def test_a_checkpoint_without_a_model_is_refused(tmp_path):
    path = save_checkpoint(tmp_path / "empty.pt", {"epoch": 1})
    with pytest.raises(UserError, match="without a model"):
        load_model(path)


@needs_yolov5n
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
