"""hubconf.py through torch.hub.load(..., source='local'): inputs as yolov5's AutoShape takes them, its results'
attributes, the entry keywords, tracing, `python hubconf.py`, and one-line errors."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from detect.config import CONFIGS_DIR
from detect.errors import UserError
from detect.hub import MODEL_NAMES, HubModel, HubResults, device_spec
from detect.inference.detector import Detector, PredictSettings
from detect.inference.sample_images import sample_images
from detect.inference.slicing import SliceSettings
from detect.models import DetectionModel, build_model
from detect.models.safe_io import save_checkpoint
from detect.models.weights import load_model, model_state
from detect.ops.boxes import xyxy_to_xywh
from tests.data.helpers import write_flat_png
from tests.models.test_weights import RunsCode
from tests.shared_data import YOLOV5N, needs_shared

REPO = Path(__file__).resolve().parent.parent
NAMES = ["cat", "dog", "bird"]
SIZE = 64  # input side: an untrained yolov5n at 64 px takes milliseconds


def hub_load(entry: str, **options) -> torch.nn.Module:
    return torch.hub.load(str(REPO), entry, source="local", device="cpu", **options)


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = build_model("yolov5n.yaml", num_classes=3, names=NAMES)
    return save_checkpoint(tmp_path_factory.mktemp("weights") / "tiny.pt", {"model": model_state(model)})


@pytest.fixture(scope="module")
def loaded(weights) -> HubModel:
    return hub_load("custom", path=str(weights))


@pytest.fixture
def model(loaded) -> HubModel:
    for name in ("conf", "iou", "classes", "max_det", "agnostic", "slice"):  # back to the class defaults
        vars(loaded).pop(name, None)
    loaded.conf = 0.001  # an untrained model scores every box near its prior (about 0.002 to 0.03)
    return loaded


@pytest.fixture(scope="module")
def photo(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("images") / "photo.png"
    cv2.imwrite(str(path), np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8))
    return path


def test_paths_pil_and_rgb_numpy_give_the_same_detections(model, photo):
    bgr = cv2.imread(str(photo))
    results = model([str(photo), photo, Image.open(photo), bgr[..., ::-1].copy(), bgr[..., ::-1].transpose(2, 0, 1)],
                    size=SIZE)
    assert isinstance(results, HubResults) and len(results) == 5
    assert results.files == ["photo.jpg", "photo_2.jpg", "photo_3.jpg", "image3.jpg", "image4.jpg"]
    assert len(results.xyxy[0]) > 0
    for rows in results.xyxy[1:]:
        torch.testing.assert_close(rows, results.xyxy[0])
    # yolov5 takes numpy arrays as RGB: the same pixels in cv2's BGR order are another image.
    as_bgr = model(bgr, size=SIZE)
    assert len(as_bgr) == 1 and not torch.equal(as_bgr.xyxy[0], results.xyxy[0])


def test_results_carry_yolov5s_four_box_formats(model, photo):
    results = model(str(photo), size=SIZE)
    rows = results.xyxy[0]
    assert rows.shape[1] == 6 and rows.dtype == torch.float32
    assert (rows[:, [0, 2]] >= 0).all() and (rows[:, [0, 2]] <= 80).all() and (rows[:, [1, 3]] <= 48).all()
    torch.testing.assert_close(results.xywh[0][:, :4], xyxy_to_xywh(rows[:, :4]))
    torch.testing.assert_close(results.xyxyn[0], rows / torch.tensor([80, 48, 80, 48, 1, 1]))
    torch.testing.assert_close(results.xywhn[0][:, 2:4] * torch.tensor([80, 48]), results.xywh[0][:, 2:4])
    assert results.names == {0: "cat", 1: "dog", 2: "bird"} and model.names == results.names
    assert results.s == (1, 3, 64, 64)


def test_nms_attributes_are_read_at_each_call(model, photo):
    assert len(model(photo, size=SIZE).xyxy[0]) > 2
    model.max_det = 2
    assert len(model(photo, size=SIZE).xyxy[0]) == 2
    model.max_det, model.classes = 1000, [1]
    assert set(model(photo, size=SIZE).xyxy[0][:, 5].tolist()) == {1.0}
    model.classes, model.agnostic, model.iou = None, True, 0.3
    model(photo, size=SIZE)
    settings = model.detector.settings
    assert (settings.agnostic, settings.iou_threshold, settings.classes) == (True, 0.3, None)
    model.conf = 1.0
    assert len(model(photo, size=SIZE).xyxy[0]) == 0


def test_augment_runs_test_time_augmentation_at_that_call(model, photo):
    plain = model(photo, size=SIZE).xyxy[0]
    assert not torch.equal(model(photo, size=SIZE, augment=True).xyxy[0], plain)
    torch.testing.assert_close(model(photo, size=SIZE).xyxy[0], plain)


def test_print_and_save(model, photo, tmp_path, capsys):
    results = model([photo, np.zeros((40, 30), np.uint8)], size=SIZE)
    results.print()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("image 1/2: 48x80 ") and out[1].startswith("image 2/2: 40x30 ")
    assert out[2].startswith("Speed: ") and out[2].endswith("at shape (2, 3, 64, 64)")
    save_dir = results.save(save_dir=tmp_path / "exp")
    assert results.save(save_dir=tmp_path / "exp") == tmp_path / "exp2"
    assert sorted(path.name for path in save_dir.iterdir()) == ["image1.jpg", "photo.jpg"]
    drawn = cv2.imread(str(save_dir / "photo.jpg"))
    assert drawn.shape == (48, 80, 3)
    assert np.abs(drawn.astype(int) - cv2.imread(str(photo)).astype(int)).mean() > 5  # boxes drawn on it


def test_pandas_frames_have_yolov5s_columns(model, photo):
    pytest.importorskip("pandas", reason="pandas is optional (not a dependency of detect)")
    results = model(photo, size=SIZE)
    frames = results.pandas()
    assert list(frames.xyxy[0].columns) == ["xmin", "ymin", "xmax", "ymax", "confidence", "class", "name"]
    assert list(frames.xywhn[0].columns)[:4] == ["xcenter", "ycenter", "width", "height"]
    assert len(frames.xyxy[0]) == len(results.xyxy[0])
    assert frames.xyxy[0]["name"].tolist() == [NAMES[int(c)] for c in results.xyxy[0][:, 5]]


def test_pandas_missing_is_one_line(model, photo, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas then raises ImportError
    with pytest.raises(UserError, match=r"^results.pandas\(\) needs pandas, .*: pip install pandas$"):
        model(photo, size=SIZE).pandas()


def test_a_tensor_gives_decoded_predictions_and_traces(model, weights):
    images = torch.rand(2, 3, 64, 96)
    predictions = model(images)
    assert predictions.shape == (2, 3 * (8 * 12 + 4 * 6 + 2 * 3), 5 + 3)
    reference = hub_load("custom", path=str(weights), autoshape=False)
    assert isinstance(reference, DetectionModel)
    torch.testing.assert_close(predictions, reference.predict(images), rtol=1e-4, atol=1e-3)  # fused BatchNorm
    traced = torch.jit.trace(model, [torch.zeros(1, 3, 64, 64)])
    torch.testing.assert_close(traced(images[:1, :, :, :64]), model(images[:1, :, :, :64]))


def test_named_entries_find_weights_and_check_their_keywords(weights, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"^weights not found: yolov5s.pt \(nothing is downloaded: .* "
                                        rf"{tmp_path / 'weights'} or {REPO / 'weights'}\)$"):
        hub_load("yolov5s")
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "yolov5s.pt").write_bytes(weights.read_bytes())
    assert hub_load("yolov5s").names == {0: "cat", 1: "dog", 2: "bird"}
    assert hub_load("custom", path="yolov5s").names[2] == "bird"  # no suffix: yolov5s.pt, as yolov5's custom()
    untrained = hub_load("yolov5n6", pretrained=False, classes=5)
    assert len(untrained.names) == 5 and untrained.stride == 64
    with pytest.raises(UserError, match="channels=1: detect's models take 3-channel"):
        hub_load("yolov5s", channels=1)


def test_a_named_model_with_other_classes_holds_the_weights_that_fit(weights, tmp_path, monkeypatch, capsys):
    """The hub tutorial's torch.hub.load("ultralytics/yolov5", "yolov5s", classes=10), here on a 3-class yolov5n."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "yolov5n.pt").write_bytes(weights.read_bytes())
    capsys.readouterr()
    model = hub_load("yolov5n", classes=10, autoshape=False)
    # All but the anchors (the yaml's stay, as yolov5's intersect_dicts) and the Detect head's 3 output convs.
    assert capsys.readouterr().out == "Transferred 342/349 tensors from yolov5n.pt to yolov5n with 10 classes\n"
    assert isinstance(model, DetectionModel) and model.nc == 10 and model.names == [str(i) for i in range(10)]
    source = load_model(weights).state_dict()
    state = model.state_dict()
    assert state["model.24.m.0.weight"].shape[0] == 3 * (5 + 10) != source["model.24.m.0.weight"].shape[0]
    assert all(torch.equal(state[name], tensor) for name, tensor in source.items()
               if not name.startswith("model.24."))
    hub = hub_load("yolov5n", classes=10)
    assert hub.nc == 10 and len(hub(np.zeros((48, 80, 3)), size=SIZE)) == 1
    capsys.readouterr()
    same = hub_load("yolov5n", classes=3)  # the checkpoint's own count: the checkpoint as it is
    assert same.names == {0: "cat", 1: "dog", 2: "bird"} and "Transferred" not in capsys.readouterr().out


def test_a_code_running_pickle_is_refused_on_every_hub_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran"
    torch.save({"model": RunsCode(marker)}, tmp_path / "yolov5n.pt")
    for load in (lambda: hub_load("custom", path="yolov5n.pt"), lambda: hub_load("yolov5n", classes=10),
                 lambda: hub_load("yolov5n", autoshape=False)):
        with pytest.raises(UserError, match="asks for os.system, which is not allowed"):
            load()
    assert not marker.exists()


@needs_shared
def test_yolov5n_with_ten_classes_transfers_all_but_its_head(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "yolov5n.pt").symlink_to(YOLOV5N)
    capsys.readouterr()
    model = hub_load("yolov5n", classes=10)
    out = capsys.readouterr().out
    assert out == "Transferred 342/349 tensors from weights/yolov5n.pt to yolov5n with 10 classes\n"
    assert model.nc == 10


def test_hubconf_has_yolov5s_entries_each_with_a_bundled_yaml():
    spec = importlib.util.spec_from_file_location("hubconf", REPO / "hubconf.py")
    hubconf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hubconf)
    entries = {name for name in dir(hubconf) if callable(getattr(hubconf, name)) and not name.startswith("_")}
    assert entries == {"custom", *MODEL_NAMES}  # what torch.hub.list shows
    assert len(MODEL_NAMES) == 10 and all((CONFIGS_DIR / "models" / f"{name}.yaml").is_file() for name in MODEL_NAMES)


def test_yolov5_device_arguments_become_backend_specs():
    assert [device_spec(device) for device in (None, "", 0, "0,1", torch.device("cpu"), "cpu")] == [
        "auto", "auto", "0", "0,1", "cpu", "cpu"]


def test_unreadable_inputs_are_one_line(model, tmp_path):
    with pytest.raises(UserError, match="never downloads"):
        model("https://example.com/zidane.jpg")
    with pytest.raises(UserError, match=f"^{tmp_path / 'missing.jpg'}: FileNotFoundError"):
        model(tmp_path / "missing.jpg")
    with pytest.raises(UserError, match="cannot read a dict as an image"):
        model({"not": "an image"})


def test_a_size_past_the_bound_and_an_image_past_the_pixel_limit_are_one_line(model, photo, tmp_path):
    with pytest.raises(UserError, match=r"^image size 100000 x 100000: each side must be an integer in \[1, 8192\]$"):
        model(photo, size=100000)
    bomb = write_flat_png(tmp_path / "bomb.png", 30000, 30000)  # 0.9 MB, 2.7 GB decoded
    with pytest.raises(UserError, match=f"^{bomb}: ImageTooLarge: 30000x30000 is 900,000,000 pixels, more than"):
        model([photo, bomb])


def run_hubconf(model: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "hubconf.py"), "--model", model], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)


def test_hubconf_as_a_script_predicts_on_the_samples(weights, tmp_path):
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "yolov5n.pt").write_bytes(weights.read_bytes())
    done = run_hubconf("yolov5n", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("image 1/5: 512x512 ")
    assert sorted(path.name for path in (tmp_path / "runs" / "hub" / "exp").iterdir()) == [
        "astronaut.jpg", "astronaut_2.jpg", "chelsea.jpg", "image2.jpg", "image4.jpg"]
    missing = run_hubconf("yolov5x", tmp_path)
    assert missing.returncode == 2 and missing.stderr.startswith("error: weights not found: yolov5x.pt")
    assert len(missing.stderr.splitlines()) == 1


@needs_shared
def test_yolov5n_finds_what_the_samples_show():
    model = hub_load("custom", path=str(YOLOV5N))
    results = model(sample_images(), size=320)
    found = [{results.names[int(cls)] for cls in rows[:, 5]} for rows in results.xyxy]
    assert "person" in found[0] and "cat" in found[1] and "cup" in found[2]


def test_slice_runs_windows_of_the_full_image_as_the_detector_does(model, weights, tmp_path):
    path = tmp_path / "large.png"
    cv2.imwrite(str(path), np.random.default_rng(1).integers(0, 255, (150, 200, 3), dtype=np.uint8))
    model.slice = 64
    sliced = model(path, size=SIZE).xyxy[0]
    settings = PredictSettings(imgsz=(SIZE, SIZE), conf_threshold=0.001, slicing=SliceSettings(64))
    torch.testing.assert_close(sliced, Detector(weights, "cpu", settings)(path)[0].rows)
    assert (sliced[:, 2] > 100).any()  # boxes over the whole 200 px, not a 64 px fit of it
    model.slice = None
    assert not torch.equal(model(path, size=SIZE).xyxy[0], sliced)
