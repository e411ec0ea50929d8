"""predict, export and val run as a user would (tests/user_run.py), writing where links lead back to what they read
(issue 58): links at every level of their output (the run folder or --output-dir itself, a folder in it, a file in
it, a link to a parent of the sources) are replaced by real folders and files, never written through, and every source
file (the images predicted, the weights exported, the dataset scored) keeps its bytes; an output that is a source is
one line, exit 2. Each command's writes go through detect/atomic_file (tests/test_one_writer.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data.annotations.helpers import write_images
from tests.hostile import assert_refused, every_class_model, fingerprints, save_model
from tests.training.helpers import tiny_dataset
from tests.user_run import run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def detecting(tmp_path_factory) -> Path:
    """A checkpoint that detects each of its three classes on any image: every output has something to write."""
    return save_model(every_class_model(["a", "b", "c"]), tmp_path_factory.mktemp("weights") / "model.pt")


def _predict(weights: Path, source: Path, project: Path, *extra: str, cwd: Path | None = None):
    return run_cli("detect.predict", "--weights", str(weights), "--source", str(source), "--imgsz", "64",
                   "--device", "cpu", "--project", str(project), "--name", "exp", "--exist-ok", "--save-txt",
                   "--save-crop", *extra, cwd=cwd, timeout=180, memory_gb=4)


def test_predict_with_links_at_every_level_of_its_run_folder(tmp_path: Path, detecting: Path) -> None:
    images = write_images(tmp_path / "images", {"a.jpg": (64, 48), "b.jpg": (48, 64)})
    before = fingerprints(images)
    run = tmp_path / "runs" / "exp"
    (run / "crops").mkdir(parents=True)
    (run / "a.jpg").symlink_to(images / "a.jpg")  # a file: the annotated a.jpg would be written over the source
    (run / "labels").symlink_to(images, target_is_directory=True)  # a folder linked to the source folder
    (run / "crops" / "a").symlink_to(tmp_path, target_is_directory=True)  # a link to a parent of the sources
    (tmp_path / "alias").symlink_to(tmp_path / "runs", target_is_directory=True)  # --project a link itself
    done = _predict(detecting, images, tmp_path / "alias")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert fingerprints(images) == before
    assert not any(path.is_symlink() for path in run.rglob("*"))
    assert {path.name for path in (run / "labels").iterdir()} == {"a.txt", "b.txt"}
    assert (run / "a.jpg").read_bytes() != (images / "a.jpg").read_bytes() and any((run / "crops" / "a").iterdir())


def test_predict_into_its_source_folder_is_refused_and_beside_it_allowed(tmp_path: Path, detecting: Path) -> None:
    images = write_images(tmp_path / "images", {"a.jpg": (64, 48)})
    before = fingerprints(images)
    # the run folder is the source folder: the annotated a.jpg would replace the image
    assert_refused(run_cli("detect.predict", "--weights", str(detecting), "--source", str(images), "--imgsz", "64",
                           "--device", "cpu", "--project", str(tmp_path), "--name", "images", "--exist-ok",
                           timeout=180, memory_gb=4),
                   f"error: run folder {images}: it is {images}, the --source, which this command reads")
    # the run folder leads to it through a link: the annotated a.jpg would replace the image
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "exp").symlink_to(images, target_is_directory=True)
    assert_refused(_predict(detecting, images, tmp_path / "runs"),
                   f"run folder {tmp_path / 'runs' / 'exp'}: it is {images}, the --source")
    assert fingerprints(images) == before
    # --project inside the source folder: a folder is not read recursively, so runs/ beside its images is new
    done = _predict(detecting, images, images / "runs")
    assert done.returncode == 0, done.stderr[-3000:]
    assert {key: value for key, value in fingerprints(images).items() if not key.startswith("runs")} == before


def test_export_with_links_to_the_weights_in_its_output_dir(tmp_path: Path, weights: Path) -> None:
    folder = tmp_path / "w"
    folder.mkdir()
    source = folder / "tiny.pt"
    source.write_bytes(weights.read_bytes())
    before = fingerprints(folder)
    out = tmp_path / "out"
    out.mkdir()
    (out / "tiny.onnx").symlink_to(source)  # a file linked to the weights read
    (out / "tiny.torchscript").symlink_to(Path("..") / "w" / "tiny.pt")  # the same, relative
    (out / "tiny_openvino_model").symlink_to(folder, target_is_directory=True)  # a link to the weights' folder
    done = run_cli("detect.export", "--weights", str(source), "--imgsz", "64", "--include", "torchscript", "onnx",
                   "openvino", "--output-dir", str(out), timeout=300, memory_gb=6)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert fingerprints(folder) == before
    assert not any(path.is_symlink() for path in out.rglob("*"))
    assert {path.name for path in (out / "tiny_openvino_model").iterdir()} == {"tiny.xml", "tiny.bin"}
    # the weights' folder is the default --output-dir, and --output-dir may be a link to it: beside the weights
    (tmp_path / "alias").symlink_to(folder, target_is_directory=True)
    done = run_cli("detect.export", "--weights", str(source), "--imgsz", "64", "--include", "torchscript",
                   "--output-dir", str(tmp_path / "alias"), timeout=300, memory_gb=6)
    assert done.returncode == 0 and source.read_bytes() == weights.read_bytes(), done.stderr[-3000:]
    assert (folder / "tiny.torchscript").is_file()


def test_export_over_its_own_weights_is_refused(tmp_path: Path, weights: Path) -> None:
    source = tmp_path / "tiny.torchscript"  # weights named as the export they would become
    source.write_bytes(weights.read_bytes())
    done = run_cli("detect.export", "--weights", str(source), "--imgsz", "64", "--include", "torchscript",
                   timeout=300, memory_gb=6)
    assert_refused(done, f"cannot write {source}: it is {source}, the weights, which this command reads")
    assert source.read_bytes() == weights.read_bytes()


def test_val_with_links_in_its_run_folder_and_a_run_folder_in_the_data(tmp_path: Path, detecting: Path) -> None:
    data = tiny_dataset(tmp_path / "data")
    before = fingerprints(tmp_path / "data")
    run = tmp_path / "runs" / "exp"
    run.mkdir(parents=True)
    (run / "labels").symlink_to(tmp_path / "data" / "labels" / "train", target_is_directory=True)
    (run / "PR_curve.png").symlink_to(tmp_path / "data" / "images" / "train" / "000.png")
    flags = ("--weights", str(detecting), "--data", str(data), "--imgsz", "64", "--device", "cpu", "--save-txt",
             "--plots", "--no-progress")
    done = run_cli("detect.val", *flags, "--project", str(tmp_path / "runs"), "--name", "exp", "--exist-ok",
                   timeout=300, memory_gb=6)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert {key: value for key, value in fingerprints(tmp_path / "data").items() if ".cache" not in key} == before
    assert not any(path.is_symlink() for path in run.rglob("*")) and len(list((run / "labels").iterdir())) == 8
    done = run_cli("detect.val", *flags, "--project", str(tmp_path / "data" / "labels" / "train"), timeout=300,
                   memory_gb=6)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]  # after the label check's table
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: run folder {tmp_path / 'data' / 'labels' / 'train' / 'exp'}: it lies inside "
        f"{tmp_path / 'data' / 'labels' / 'train'}, the 'val' split's labels, which this command reads and never "
        "writes into; choose a place outside it")
    assert {key: value for key, value in fingerprints(tmp_path / "data").items() if ".cache" not in key} == before


def test_a_folder_where_an_output_file_goes_is_one_line(tmp_path: Path, detecting: Path) -> None:
    images = write_images(tmp_path / "images", {"a.jpg": (64, 48)})
    (tmp_path / "runs" / "exp" / "a.jpg").mkdir(parents=True)
    done = _predict(detecting, images, tmp_path / "runs")
    # After the lines of what it ran (the weights and size, the image's detections), the error is the last line.
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"error: cannot write {tmp_path / 'runs' / 'exp' / 'a.jpg'} (Is a directory)"
    assert (tmp_path / "runs" / "exp" / "a.jpg").is_dir() and not list((tmp_path / "runs" / "exp").glob(".*"))
