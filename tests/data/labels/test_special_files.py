"""A split with special entries (issue 43, item 2): looping and broken links, links to the parent folder, unreadable
folders, FIFOs named like images or labels, missing listed images. Each is counted and named once by the label check,
the rest of the split is used; nothing is opened that could block, nothing loops. The FIFO cases run the CLI in a
subprocess with a time limit, as a user would: a regression there hangs, and must not hang CI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from detect.data import load_data_config, load_split
from detect.data.labels.check import UNREADABLE_LABELS
from detect.data.storage import files
from detect.data.storage.files import BROKEN_LINK, KERNEL_FOLDER, LINK_LOOP, MISSING, NOT_REGULAR, UNREADABLE_FOLDER
from detect.errors import UserError
from tests.data.helpers import write_sample, write_yaml
from tests.user_run import run_cli

GOOD = ("0", "1", "2", "3")


def _dataset(root: Path) -> Path:
    """Four good images, one more in a folder outside reached by links (images and labels, as users link data),
    and beside them a self-link `a.jpg -> a.jpg`, a link to the parent folder, one to the split's own folder, and a
    broken link; returns the data yaml."""
    for name in GOOD:
        write_sample(root, "train", name, 40, 48, [(8, 8, 30, 30)])
    write_sample(root / "outside", "train", "4", 40, 48, [(8, 8, 30, 30)])
    images = root / "images" / "train"
    (images / "linked").symlink_to(root / "outside" / "images" / "train")
    (root / "labels" / "train" / "linked").symlink_to(root / "outside" / "labels" / "train")
    (images / "a.jpg").symlink_to("a.jpg")
    (images / "parent").symlink_to("..")
    (images / "deep").mkdir()
    (images / "deep" / "top").symlink_to(images)
    (images / "gone.jpg").symlink_to("nowhere.jpg")
    return write_yaml(root)


def _relative(root: Path, lines: list[str]) -> list[str]:
    return sorted(line.replace(f"{root}/images/train/", "").replace(f"{root}/labels/train/", "labels/")
                  for line in lines)


def test_links_that_loop_or_break_are_named_once_and_the_rest_is_used(tmp_path):
    config = load_data_config(_dataset(tmp_path))
    for cache in ("written", "loaded"):
        split = load_split(config, "train")
        assert split.cache_state == cache
        assert sorted(os.path.relpath(path,
                                      tmp_path / "images" / "train") for path in split.records.paths.astype(str)) == [
            "0.png", "1.png", "2.png", "3.png", "linked/4.png"]
        assert split.counts == {"found": 9, "usable": 5, "background": 0, "fixed": 0, "skipped": 4,
                                f"skipped: {LINK_LOOP}": 3, f"skipped: {BROKEN_LINK}": 1}
        assert _relative(tmp_path, split.details_file.read_text().splitlines()) == [
            f"a.jpg: {LINK_LOOP}", f"deep/top: {LINK_LOOP}", f"gone.jpg: {BROKEN_LINK}", f"parent: {LINK_LOOP}"]
        assert all(len(record.classes) == 1 for record in split.records)  # the linked image found its labels


def test_an_unreadable_folder_is_named_and_the_rest_is_used(tmp_path, monkeypatch):
    # As root (the tests' user) permission bits do not stop a listing: it is made to fail as it would for another
    # user, or for root in /proc/1/cwd of another namespace (files.os.scandir raises for that one folder).
    for name in GOOD:
        write_sample(tmp_path, "train", f"sub/{name}" if name == "3" else name, 40, 48, [(8, 8, 30, 30)])
    closed, scandir = tmp_path / "images" / "train" / "sub", os.scandir

    def refusing(path):
        if Path(path) == closed:
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(files.os, "scandir", refusing)
    split = load_split(load_data_config(write_yaml(tmp_path)), "train")
    assert split.counts["usable"] == 3 and split.counts[f"skipped: {UNREADABLE_FOLDER} (Permission denied)"] == 1
    assert split.details_file.read_text() == f"{closed}: {UNREADABLE_FOLDER} (Permission denied)\n"


def test_an_image_list_with_missing_paths_and_a_broken_label_link_keeps_the_rest(tmp_path):
    for name in GOOD:
        write_sample(tmp_path, "train", name, 40, 48, [(8, 8, 30, 30)])
    (tmp_path / "labels" / "train" / "1.txt").unlink()
    (tmp_path / "labels" / "train" / "1.txt").symlink_to("lost.txt")  # was: a background image
    listed = tmp_path / "train.txt"
    listed.write_text("".join(f"images/train/{name}.png\n" for name in (*GOOD, "gone", "also-gone")))
    split = load_split(load_data_config(write_yaml(tmp_path, train="train.txt")), "train")
    assert split.counts == {"found": 6, "usable": 3, "background": 0, "fixed": 0, "skipped": 3,
                            f"skipped: {MISSING}": 2, f"skipped: {UNREADABLE_LABELS}": 1}
    assert _relative(tmp_path, split.details_file.read_text().splitlines()) == [
        f"also-gone.png: {MISSING}", f"gone.png: {MISSING}", f"labels/1.txt: {BROKEN_LINK}"]


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="no /proc here")
def test_a_data_root_in_proc_is_one_line(tmp_path):
    """Case 4: `path: /proc` gave a PermissionError traceback (/proc/1/cwd)."""
    data = tmp_path / "proc.yaml"
    data.write_text(yaml.safe_dump({"path": "/proc", "train": ".", "val": ".", "names": ["a"]}))
    with pytest.raises(UserError) as raised:
        load_split(load_data_config(data), "train")
    assert str(raised.value) == (f"{data}: no images in the 'train' split (/proc); 1 skipped, the first: /proc: "
                                 f"{KERNEL_FOLDER}")
    finished = run_cli("detect.data", "--data", str(data), timeout=60, merge_output=True)
    assert finished.returncode == 2 and finished.stdout == f"error: {raised.value}\n"


def test_fifos_named_like_images_and_labels_are_skipped_by_name_from_the_cli(tmp_path):
    """Case 3 as a user meets it, with FIFOs: `python -m detect.data` checks the split without training."""
    data = _dataset(tmp_path)
    os.mkfifo(tmp_path / "images" / "train" / "fifo.jpg")
    (tmp_path / "labels" / "train" / "3.txt").unlink()
    os.mkfifo(tmp_path / "labels" / "train" / "3.txt")
    write_sample(tmp_path, "val", "0", 40, 48, [(8, 8, 30, 30)])
    os.mkfifo(tmp_path / "images" / "val" / "fifo.jpg")
    (tmp_path / "val.txt").write_text("images/val/0.png\nimages/val/fifo.jpg\n")  # a list naming a FIFO
    data.write_text(yaml.safe_dump({**yaml.safe_load(data.read_text()), "val": "val.txt"}))
    finished = run_cli("detect.data", "--data", str(data), timeout=120, merge_output=True)
    assert finished.returncode == 0 and "Traceback" not in finished.stdout, finished.stdout
    fifo = f"skipped: {NOT_REGULAR} (FIFO)"
    for row in ("found 10", "usable 4", "skipped 6", f"{fifo} 1", f"skipped: {LINK_LOOP} 3",
                f"skipped: {BROKEN_LINK} 1", f"skipped: {UNREADABLE_LABELS} 1"):
        assert row in " ".join(finished.stdout.split()), finished.stdout
    assert "found 2 usable 1 background 0 fixed 0 skipped 1" in " ".join(finished.stdout.split())  # the val list
    details = (tmp_path / "labels" / "train.detect.problems.txt").read_text().splitlines()
    assert f"{tmp_path}/labels/train/3.txt: {NOT_REGULAR} (FIFO)" in details
    assert f"{tmp_path}/images/train/fifo.jpg: {NOT_REGULAR} (FIFO)" in details
    assert (tmp_path / "labels" / "val.detect.problems.txt").read_text() == (
        f"{tmp_path}/images/val/fifo.jpg: {NOT_REGULAR} (FIFO)\n")
