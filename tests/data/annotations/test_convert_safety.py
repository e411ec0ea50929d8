"""`python -m detect.data convert` run as a user would, told to write where it must not: into the dataset's own folder
(with and without --copy), inside its images, onto a file, under a file, into a read-only folder. Each is one line,
exit 2, before anything is written: every source file keeps its bytes and no file is added."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from tests.data.annotations.helpers import write_images
from tests.user_run import run_cli


def _dataset(root: Path) -> Path:
    """yolov5's layout: root/images/val, root/labels/val and root/data.yaml with `path: .`."""
    write_images(root / "images" / "val", {"one.jpg": (64, 48), "two.jpg": (48, 64)})
    (root / "labels" / "val").mkdir(parents=True)
    (root / "labels" / "val" / "one.txt").write_text("0 0.5 0.5 0.25 0.25\n")
    (root / "labels" / "val" / "two.txt").write_text("1 0.5 0.5 0.5 0.5\n")
    source = root / "data.yaml"
    source.write_text(yaml.safe_dump({"path": ".", "train": "images/val", "val": "images/val", "names": ["a", "b"]}))
    return source


def _files(root: Path) -> dict[str, str]:
    """Every file under `root` (links as their target), by relative path, with its sha256; caches left out."""
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file() and ".cache" not in path.name}


def _refused(source: Path, out: Path, *extra: str) -> str:
    done = run_cli("detect.data", "convert", "--data", str(source), "--to", "yolo", "--out", str(out), *extra,
                   timeout=120, memory_gb=4)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stdout == "", done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]  # after the label check's tables
    assert len(errors) == 1 and errors[0].startswith("error: --out "), done.stderr
    return errors[0]


@pytest.mark.parametrize("copy", [(), ("--copy",)], ids=["links", "copy"])
@pytest.mark.parametrize("where", ["root", "images", "labels", "parent"])
def test_a_conversion_into_over_or_under_its_sources_is_refused_before_writing(tmp_path: Path, where: str,
                                                                               copy: tuple[str, ...]) -> None:
    root = tmp_path / "dataset"
    source = _dataset(root)
    run_cli("detect.data", "--data", str(source))  # the label cache, written by a check as a user would first
    before = _files(tmp_path)
    out = {"root": root, "images": root / "images" / "val" / "out", "labels": root / "labels",
           "parent": tmp_path}[where]
    line = _refused(source, out, *copy)
    assert "a source of the conversion" in line
    assert _files(tmp_path) == before
    assert not (root / "images" / "val" / "one.jpg").is_symlink()


def test_a_link_to_the_dataset_is_seen_through(tmp_path: Path) -> None:
    source = _dataset(tmp_path / "dataset")
    (tmp_path / "alias").symlink_to(tmp_path / "dataset", target_is_directory=True)
    before = _files(tmp_path / "dataset")
    line = _refused(source, tmp_path / "alias")
    assert line.startswith(f"error: --out {tmp_path / 'alias'} ({tmp_path / 'dataset'}): holds ")
    assert _files(tmp_path / "dataset") == before


def test_an_out_that_is_a_file_under_a_file_or_read_only_is_one_line(tmp_path: Path) -> None:
    source = _dataset(tmp_path / "dataset")
    (tmp_path / "a_file").write_text("mine\n")
    assert _refused(source, tmp_path / "a_file").endswith("is a file, not a folder")
    assert _refused(source, tmp_path / "a_file" / "deeper").endswith(f"lies under {tmp_path / 'a_file'}, a file, "
                                                                     "not a folder")
    assert (tmp_path / "a_file").read_text() == "mine\n"
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)  # no write bits: read-only, even for root (storage/cache_places.py, folder_writable)
    try:
        assert "cannot be written" in _refused(source, locked / "out")
    finally:
        locked.chmod(0o755)
    assert not any(locked.iterdir())


def test_two_images_that_would_share_a_name_are_refused(tmp_path: Path) -> None:
    source = _dataset(tmp_path / "dataset")
    write_images(tmp_path / "elsewhere" / "images", {"one.jpg": (32, 32)})
    listing = tmp_path / "dataset" / "both.txt"
    listing.write_text(f"{tmp_path / 'dataset' / 'images' / 'val' / 'one.jpg'}\n{tmp_path / 'elsewhere' / 'images' / 'one.jpg'}\n")
    spec = yaml.safe_load(source.read_text())
    source.write_text(yaml.safe_dump({**spec, "val": "both.txt"}))
    assert "would both be written as" in _refused(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_conversion_beside_the_dataset_writes_and_reads_back(tmp_path: Path) -> None:
    source = _dataset(tmp_path / "dataset")
    before = _files(tmp_path / "dataset")
    out = tmp_path / "dataset" / "converted"  # inside the dataset's root, outside its images and labels: allowed
    done = run_cli("detect.data", "convert", "--data", str(source), "--to", "coco", "--out", str(out), timeout=120)
    assert done.returncode == 0, done.stderr
    assert {key: value for key, value in _files(tmp_path / "dataset").items() if not key.startswith("converted")} == \
        before
    written = json.loads((out / "val.json").read_text())
    assert [annotation["segmentation"] for annotation in written["annotations"]] == [[], []]
