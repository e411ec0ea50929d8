"""A training run's writes go through the one writer (detect/atomic_file), in one process and at 2 ranks under
torchrun: a run folder that holds links into the dataset (left by hand, or by an earlier run's tools) has them replaced
by real folders and files, never written through, and every file of the dataset keeps its bytes; a run folder inside
the dataset's images is one line, exit 2, at every rank (no rank left waiting), with nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile import fingerprints
from tests.training.helpers import tiny_dataset, train_args

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _train(ranks: int, args: list[str], xdg: Path) -> subprocess.CompletedProcess:
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)] if ranks > 1 else []
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": str(xdg),
               "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *launcher, "-m", "detect.train", *args], capture_output=True, text=True,
                          env=environ, cwd=REPO, timeout=600, check=False)


def _sources(root: Path) -> dict[str, str]:
    return {path: found for path, found in fingerprints(root).items() if ".cache" not in path}


@pytest.mark.parametrize("ranks", [1, 2])
def test_links_in_the_run_folder_are_replaced_and_the_dataset_keeps_its_bytes(tmp_path: Path, ranks: int) -> None:
    data = tiny_dataset(tmp_path / "data")
    run = tmp_path / "runs" / "exp"
    run.mkdir(parents=True)
    (run / "weights").symlink_to(tmp_path / "data" / "images" / "train", target_is_directory=True)
    (run / "results.csv").symlink_to(tmp_path / "data" / "labels" / "train" / "000.txt")
    (run / "labels.png").symlink_to(tmp_path / "data" / "images" / "train" / "001.png")
    before = _sources(tmp_path / "data")
    done = _train(ranks, train_args(data, tmp_path / "runs", "--exist-ok"), tmp_path / "xdg")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert _sources(tmp_path / "data") == before
    assert not any(path.is_symlink() for path in run.rglob("*"))
    assert (run / "weights" / "last.pt").is_file() and (run / "results.csv").read_text().startswith("epoch")
    assert "replaced by a folder so that nothing is written through it" in done.stderr


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_run_folder_inside_the_images_is_one_line_at_every_rank(tmp_path: Path, ranks: int) -> None:
    data = tiny_dataset(tmp_path / "data")
    before = _sources(tmp_path / "data")
    (tmp_path / "alias").symlink_to(tmp_path / "data" / "images", target_is_directory=True)
    done = _train(ranks, train_args(data, tmp_path / "alias" / "train" / "runs"), tmp_path / "xdg")
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode != 0 and "pair.cc" not in done.stderr, done.stderr[-3000:]  # no rank left waiting
    assert len(errors) == ranks and len(set(errors)) == 1, done.stderr[-3000:]  # each rank its line, at once
    assert "lies inside" in errors[0] and "the 'train' split's images" in errors[0], errors
    assert _sources(tmp_path / "data") == before
