"""Issue 43, item 1, run as a user runs the CLIs: class names and --name / --project / --output-dir that point
elsewhere write nothing outside the run folder; a refused name is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from detect import predict, train
from detect.errors import UserError
from detect.run_dir import safe_names
from tests.data.helpers import write_yaml
from tests.hostile import assert_refused, every_class_model, save_model, tree
from tests.training.helpers import tiny_dataset
from tests.user_run import run_cli


def hostile_names(tmp_path: Path) -> list[str]:
    """Nine class names that are paths, separators, control characters, nothing, a device, and a pair that clash."""
    return ["../../../x", str(tmp_path / "abs" / "path"), "..\\..\\x", "a\nb", "", "CON", "a/b", "a_b", "$\\frac{$"]


def only_inside(before: set[Path], after: set[Path], *folders: Path) -> None:
    """What appeared is each of `folders`, what they hold, and the folders above them."""
    outside = sorted(str(path) for path in after - before
                     if not any(path == folder or folder in path.parents or path in folder.parents
                                for folder in folders))
    assert outside == []


def test_predict_save_crop_keeps_every_class_in_the_run_folder(tmp_path):
    names = hostile_names(tmp_path)
    weights = save_model(every_class_model(names), tmp_path / "hostile.pt")
    cv2.imwrite(str(tmp_path / "photo.jpg"), np.random.default_rng(0).integers(0, 255, (64, 80, 3), np.uint8))
    project = tmp_path / "deep" / "er" / "runs"
    before = tree(tmp_path)
    done = run_cli("detect.predict", "--weights", str(weights), "--source", str(tmp_path / "photo.jpg"), "--imgsz",
                   "64", "--device", "cpu", "--save-crop", "--save-txt", "--save-json", "--project", str(project),
                   cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    save_dir = project / "exp"
    only_inside(before, tree(tmp_path), save_dir)
    folders = {path.name: path for path in (save_dir / "crops").iterdir()}
    assert set(folders) == set(safe_names(names))  # every class, each in its own folder: the crop is still saved
    assert all((folder / "photo.jpg").is_file() for folder in folders.values())
    classes = np.loadtxt(save_dir / "labels" / "photo.txt", ndmin=2)[:, 0]
    assert set(classes.astype(int)) == set(range(len(names)))
    assert (save_dir / "photo.jpg").is_file() and (save_dir / "predictions.json").is_file()


def test_val_with_hostile_class_names_writes_labels_and_plots_in_its_run_folder(tmp_path):
    names = hostile_names(tmp_path)
    data = tiny_dataset(tmp_path / "set", count=4)
    write_yaml(data.parent, tuple(names))
    weights = save_model(every_class_model(names), tmp_path / "hostile.pt")
    before = tree(tmp_path)
    done = run_cli("detect.val", "--weights", str(weights), "--data", str(data), "--imgsz", "64", "--batch-size",
                   "4", "--workers", "0", "--device", "cpu", "--save-txt", "--save-json", "--plots", "--verbose",
                   "--no-progress", "--cache-dir", str(tmp_path / "cache"), "--project", str(tmp_path / "runs"),
                   cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    save_dir = tmp_path / "runs" / "exp"
    only_inside(before, tree(tmp_path), save_dir, tmp_path / "cache")  # the label cache goes where it is told
    assert len(list((save_dir / "labels").glob("*.txt"))) == 4
    for plot in ("confusion_matrix.png", "PR_curve.png", "val_predictions.jpg"):
        assert cv2.imread(str(save_dir / plot)) is not None, plot


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Weights, a photo and a tiny dataset that every CLI runs on in seconds, in a folder of their own."""
    folder = tmp_path_factory.mktemp("inputs")
    save_model(every_class_model(["a", "b", "c"]), folder / "tiny.pt")
    cv2.imwrite(str(folder / "photo.jpg"), np.zeros((32, 32, 3), np.uint8))
    tiny_dataset(folder / "set", count=4)
    return folder


def cli_args(module: str, inputs: Path) -> list[str]:
    """Flags that run `module` on the inputs (what it would write, it would write in seconds)."""
    common = ["--weights", str(inputs / "tiny.pt"), "--device", "cpu"]
    data = ["--data", str(inputs / "set" / "data.yaml"), "--workers", "0", "--cache-dir", str(inputs / "cache")]
    return common + {"detect.predict": ["--source", str(inputs / "photo.jpg"), "--imgsz", "32"],
                     "detect.val": [*data, "--imgsz", "64"],
                     "detect.train": [*data, "--imgsz", "64", "--epochs", "1", "--batch-size", "4", "--noval",
                                      "--no-progress"],
                     "detect.export": ["--imgsz", "64"]}[module]


@pytest.mark.parametrize(("module", "flag", "value"), [
    ("detect.predict", "--name", "../../x"),
    ("detect.val", "--name", "<tmp>/abs"),
    ("detect.train", "--name", "a\nb"),
    ("detect.export", "--output-dir", "out\nx"),
])
def test_each_cli_refuses_a_run_folder_outside_its_project_in_one_line(tmp_path, inputs, module, flag, value):
    value = value.replace("<tmp>", str(tmp_path))
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    before = tree(tmp_path)
    done = run_cli(module, *cli_args(module, inputs), flag, value, cwd=cwd)
    assert_refused(done, f"{flag} {value!r}")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("options", [["--name", "<tmp>/abs"], ["--name", "a\rb"], ["--name", "exp/../../x"],
                                     ["--project", "<tmp>/runs\nx"], ["--name", ""], ["--name", "."]])
def test_predict_refuses_each_bad_name_before_loading_anything(tmp_path, inputs, capsys, options):
    options = [option.replace("<tmp>", str(tmp_path)) for option in options]
    argv = [*cli_args("detect.predict", inputs), "--project", str(tmp_path / "runs"), *options]
    assert predict.main(argv) == 2
    assert capsys.readouterr().err.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_train_run_refuses_it_from_python_too(tmp_path, inputs):
    with pytest.raises(UserError, match=r"^--name '\.\./x': must be a folder inside --project"):
        train.run(cfg="yolov5n.yaml", data=str(inputs / "set" / "data.yaml"), imgsz=64, epochs=1, batch_size=4,
                  workers=0, device="cpu", noval=True, progress=False, project=str(tmp_path / "runs"), name="../x")
    assert list(tmp_path.iterdir()) == []


def test_a_name_with_a_slash_inside_the_project_stays_allowed(tmp_path):
    weights = save_model(every_class_model(["cat"]), tmp_path / "one.pt")
    cv2.imwrite(str(tmp_path / "photo.jpg"), np.zeros((32, 32, 3), np.uint8))
    save_dir = predict.run(weights=str(weights), source=str(tmp_path / "photo.jpg"), imgsz=32, device="cpu",
                           project=str(tmp_path / "runs"), name="exp/a")
    assert save_dir == tmp_path / "runs" / "exp" / "a" and (save_dir / "photo.jpg").is_file()
