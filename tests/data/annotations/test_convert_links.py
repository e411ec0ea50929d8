"""`python -m detect.data convert` run as a user would, into an --out that holds links to the dataset it converts (issue
58): a folder of it linked to the source images (`mine-yolo/images/val -> ds/images/val`, how a converted copy is kept
beside the original), a file linked to a source file, a link to a parent or grandparent of the sources, relative links,
a link to a link, hard links, a link to itself or to nothing, and --out given as a link. With and without --copy,
every source file keeps its bytes (sha256) and every link of the dataset stays as it was: a link inside --out is
replaced by a real folder or file, never written through (it ended in `RuntimeError: Symlink loop` with every source
JPEG a link to itself, and --copy deleted a source image)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from detect.data import load_data_config, load_split
from tests.data.annotations.helpers import rows_of
from tests.data.annotations.test_convert_safety import _dataset, _refused
from tests.hostile import fingerprints
from tests.user_run import REPO, run_cli


def _sources(root: Path) -> dict[str, str]:
    """The dataset's files, links and folders, its label cache left out (a check writes it beside the labels)."""
    return {path: found for path, found in fingerprints(root).items() if ".cache" not in path}


def _links_inside(tmp_path: Path, ds: Path) -> Path:
    """The issue's case and a file at each level: mine/images/val -> ds/images/val, mine/labels/val/one.txt -> its
    source, mine/data.yaml -> ds/data.yaml."""
    mine = tmp_path / "mine"
    (mine / "images").mkdir(parents=True)
    (mine / "labels" / "val").mkdir(parents=True)
    (mine / "images" / "val").symlink_to(ds / "images" / "val", target_is_directory=True)
    (mine / "labels" / "val" / "one.txt").symlink_to(ds / "labels" / "val" / "one.txt")
    (mine / "data.yaml").symlink_to(ds / "data.yaml")
    return mine


def _links_to_parents(tmp_path: Path, ds: Path) -> Path:
    """mine/images -> hop -> tmp_path (a link to a link to the dataset's grandparent), mine/labels -> ../ds/labels (a
    relative link to the label folder's parent)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (tmp_path / "hop").symlink_to(tmp_path, target_is_directory=True)
    (mine / "images").symlink_to(tmp_path / "hop", target_is_directory=True)
    (mine / "labels").symlink_to(Path("..") / "ds" / "labels", target_is_directory=True)
    return mine


def _hard_links(tmp_path: Path, ds: Path) -> Path:
    """mine/images/val/one.jpg and mine/labels/val/one.txt hard links to their sources: names of their own."""
    mine = tmp_path / "mine"
    for folder, name in (("images", "one.jpg"), ("labels", "one.txt")):
        (mine / folder / "val").mkdir(parents=True)
        os.link(ds / folder / "val" / name, mine / folder / "val" / name)
    return mine


def _dead_links(tmp_path: Path, ds: Path) -> Path:
    """mine/images/val -> val (a link to itself) and mine/labels/val -> a place that does not exist."""
    mine = tmp_path / "mine"
    (mine / "images").mkdir(parents=True)
    (mine / "labels").mkdir()
    (mine / "images" / "val").symlink_to("val")
    (mine / "labels" / "val").symlink_to(tmp_path / "nowhere" / "val", target_is_directory=True)
    return mine


def _out_a_link(tmp_path: Path, ds: Path) -> Path:
    """--out given as a link (to a folder holding the issue's link): the link the user names is followed."""
    _links_inside(tmp_path, ds)
    (tmp_path / "alias").symlink_to(tmp_path / "mine", target_is_directory=True)
    return tmp_path / "alias"


@pytest.mark.parametrize("copy", [(), ("--copy",)], ids=["links", "copy"])
@pytest.mark.parametrize("layout", [_links_inside, _links_to_parents, _hard_links, _dead_links, _out_a_link],
                         ids=["inside", "parents", "hard", "dead", "out-a-link"])
def test_links_at_every_level_of_out_leave_every_source_byte_identical(tmp_path: Path, layout, copy) -> None:
    source = _dataset(tmp_path / "ds")
    ds = tmp_path / "ds"
    expected = rows_of(load_split(load_data_config(source), "val"))
    before = _sources(ds)
    out = layout(tmp_path, ds)
    done = run_cli("detect.data", "convert", "--data", str(source), "--to", "yolo", "--out", str(out), *copy,
                   timeout=180, memory_gb=4)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert _sources(ds) == before
    mine = tmp_path / "mine"
    for folder in (mine, mine / "images", mine / "images" / "val", mine / "labels", mine / "labels" / "val"):
        assert folder.is_dir() and not folder.is_symlink(), folder
    for name in ("one", "two"):
        image = mine / "images" / "val" / f"{name}.jpg"
        assert image.is_symlink() != bool(copy)
        assert image.read_bytes() == (ds / "images" / "val" / f"{name}.jpg").read_bytes()
        assert not (mine / "labels" / "val" / f"{name}.txt").is_symlink()
    assert not (mine / "data.yaml").is_symlink()
    assert rows_of(load_split(load_data_config(mine / "data.yaml"), "val")) == expected
    if layout is _links_inside:
        assert "mine/images/val: a link (to " in done.stderr and "replaced by a folder" in done.stderr


@pytest.mark.parametrize("spelling", ["dotdot", "proc-cwd"])
def test_out_as_another_spelling_of_the_dataset_is_refused(tmp_path: Path, spelling: str) -> None:
    source = _dataset(tmp_path / "ds")
    before = _sources(tmp_path / "ds")
    out = {"dotdot": tmp_path / "ds" / "images" / ".." / ".", "proc-cwd": Path("/proc/self/cwd")}[spelling]
    done_line = _refused(source, out) if spelling == "dotdot" else None
    if spelling == "proc-cwd":  # the CLI runs in the dataset's folder: /proc/self/cwd is it
        done = run_cli("detect.data", "convert", "--data", str(source), "--to", "yolo", "--out", str(out),
                       cwd=tmp_path / "ds", timeout=120, memory_gb=4)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        done_line = done.stderr.strip().splitlines()[-1]
    assert done_line.startswith("error: --out ") and "a source of the conversion" in done_line
    assert _sources(tmp_path / "ds") == before


def _can_mount() -> bool:
    """Whether this machine lets a process mount in a namespace of its own (unshare -rm: no root needed)."""
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.parametrize("to", ["yolo", "coco"])
def test_out_as_a_second_mount_of_the_dataset_is_refused_before_writing(tmp_path: Path, to: str) -> None:
    if not _can_mount():
        pytest.skip("unshare -rm (a mount namespace of one's own) is not allowed here")
    source = _dataset(tmp_path / "ds")
    (tmp_path / "mounted").mkdir()
    before = _sources(tmp_path / "ds")
    # a bind mount is no link: only the folders' identity (device, inode) says that mounted/ is the dataset
    script = (f"mount --bind {tmp_path / 'ds'} {tmp_path / 'mounted'} && {sys.executable} -m detect.data convert "
              f"--data {source} --to {to} --out {tmp_path / 'mounted'}")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: --out {tmp_path / 'mounted'}: holds ")
    assert _sources(tmp_path / "ds") == before


def test_out_a_link_that_leads_back_to_itself_is_one_line(tmp_path: Path) -> None:
    source = _dataset(tmp_path / "ds")
    before = _sources(tmp_path / "ds")
    (tmp_path / "mine").symlink_to(tmp_path / "mine")  # it was "is a file, not a folder"
    mine = tmp_path / "mine"
    for out, line in ((mine, "is a link"), (mine / "sub", f"lies under {mine}, a link")):
        done = run_cli("detect.data", "convert", "--data", str(source), "--to", "yolo", "--out", str(out), timeout=120,
                       memory_gb=4)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines()[-1] == f"error: --out {out}: {line} that leads back to itself (a loop)"
    assert _sources(tmp_path / "ds") == before and (tmp_path / "mine").is_symlink()
