"""Training on a split with special entries (issue 43, case 3): a self-link `a.jpg -> a.jpg`, a link to the parent
folder, a broken link, a FIFO named like an image and one named like a label. The run trains and validates on the
rest, in one process and at 2 ranks under torchrun, and bad_files.txt names each entry once. Before, the listing
raised OSError (the whole split lost) or the check blocked on the FIFO for ever."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from detect.data.labels.check import UNREADABLE_LABELS
from detect.data.storage.files import BROKEN_LINK, LINK_LOOP, NOT_REGULAR
from tests.training.helpers import tiny_dataset, train_args
from tests.user_run import run_cli

USABLE = 7  # tiny_dataset's 8 images, less the one whose label file is a FIFO


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("special")
    data = tiny_dataset(root)
    images, labels = root / "images" / "train", root / "labels" / "train"
    (images / "a.jpg").symlink_to("a.jpg")
    (images / "parent").symlink_to("..")
    (images / "gone.jpg").symlink_to("nowhere.jpg")
    os.mkfifo(images / "fifo.jpg")
    (labels / "007.txt").unlink()
    os.mkfifo(labels / "007.txt")
    return data


def expected_bad_files(data: Path) -> list[str]:
    images, labels = data.parent / "images" / "train", data.parent / "labels" / "train"
    return sorted([f"{images / 'a.jpg'}: {LINK_LOOP}", f"{images / 'parent'}: {LINK_LOOP}",
                   f"{images / 'gone.jpg'}: {BROKEN_LINK}", f"{images / 'fifo.jpg'}: {NOT_REGULAR} (FIFO)",
                   f"{labels / '007.txt'}: {NOT_REGULAR} (FIFO)"])


def check_run(output: str, save_dir: Path, data: Path) -> None:
    assert "Traceback" not in output, output
    assert f"{UNREADABLE_LABELS}" in output and f"({USABLE} images)" in output, output  # the final evaluation
    lines = (save_dir / "bad_files.txt").read_text().splitlines()
    assert sorted(line for line in lines if line and not line.startswith("#")) == expected_bad_files(data)


def test_one_process_trains_and_validates_on_the_rest(data, tmp_path):
    finished = run_cli("detect.train", *train_args(data, tmp_path, epochs=1), timeout=300, merge_output=True)
    assert finished.returncode == 0, finished.stdout[-5000:]
    check_run(finished.stdout, tmp_path / "exp", data)


@pytest.mark.slow
def test_two_ranks_train_and_validate_on_the_rest(data, tmp_path):
    launcher = ["torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "detect.train"]
    finished = run_cli(*launcher, *train_args(data, tmp_path, epochs=1), timeout=400, merge_output=True)
    assert finished.returncode == 0, finished.stdout[-5000:]
    assert [path.name for path in tmp_path.iterdir()] == ["exp"]
    check_run(finished.stdout, tmp_path / "exp", data)
