"""detect/atomic_file/places.py: a write lands where its path leads at the moment of writing, and never
over or into what the command reads, however the path is spelt; inside an output folder no link is followed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from detect import atomic_file
from detect.atomic_file import places
from tests.hostile import fingerprints
from tests.user_run import REPO


def _dataset(root: Path) -> Path:
    """root/images/train/a.jpg, root/labels/train/a.txt and root/data.yaml."""
    for folder, name, text in (("images/train", "a.jpg", "JPEG"), ("labels/train", "a.txt", "0 .5 .5 .1 .1\n"),
                               ("", "data.yaml", "train: images/train\n")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / name).write_text(text)
    return root


def _protect(root: Path) -> None:
    atomic_file.protect([root / "images/train", root / "labels/train"], "the 'train' split's images", trees=True)
    atomic_file.protect([root / "data.yaml"], "the data yaml")


@pytest.mark.parametrize("spelling", ["plain", "dotdot", "link to the folder", "link to a grandparent", "link to a link",
                                      "relative link", "proc cwd"])
def test_a_write_into_a_source_folder_is_refused_however_its_path_is_spelt(tmp_path, monkeypatch, spelling):
    root = _dataset(tmp_path / "ds")
    before = fingerprints(root)
    (tmp_path / "to_images").symlink_to(root / "images" / "train")
    (tmp_path / "to_root").symlink_to(tmp_path)
    (tmp_path / "to_link").symlink_to(tmp_path / "to_images")
    (tmp_path / "relative").symlink_to(Path("ds") / "images")
    monkeypatch.chdir(tmp_path)
    path = {"plain": root / "images/train/a.jpg", "dotdot": root / "labels/../images/train/b.jpg",
            "link to the folder": tmp_path / "to_images/b.jpg", "link to a grandparent": "to_root/ds/images/train/a.jpg",
            "link to a link": tmp_path / "to_link/a.jpg", "relative link": "relative/train/c.jpg",
            "proc cwd": "/proc/self/cwd/ds/images/train/a.jpg"}[spelling]
    with atomic_file.command():
        _protect(root)
        with pytest.raises(atomic_file.Refused, match=f"lies inside {root / 'images/train'}, the 'train' split"):
            atomic_file.write_text(path, "written")
        with pytest.raises(atomic_file.Refused, match="it is .*data.yaml, the data yaml"):
            atomic_file.write_text(Path(path).parent / "../../data.yaml", "names: []")
    assert fingerprints(root) == before


def test_a_link_inside_an_output_folder_is_replaced_by_a_folder_at_every_level(tmp_path):
    root = _dataset(tmp_path / "ds")
    before = fingerprints(root)
    out = tmp_path / "out"
    (out / "images").mkdir(parents=True)
    (out / "images" / "train").symlink_to(root / "images" / "train")  # a folder inside it
    (out / "labels").symlink_to(root / "labels")  # a link to a parent of the sources
    (out / "data.yaml").symlink_to(root / "data.yaml")  # a file inside it
    with atomic_file.command():
        _protect(root)
        atomic_file.output_folder(out, "--out")
        atomic_file.link_file(out / "images/train/a.jpg", root / "images/train/a.jpg")
        atomic_file.write_text(out / "labels/train/a.txt", "1 .5 .5 .2 .2\n")
        atomic_file.write_text(out / "data.yaml", "train: images/train\n")
    assert fingerprints(root) == before
    assert not any(path.is_symlink() for path in (out / "images/train", out / "labels", out / "data.yaml"))
    assert (out / "labels/train/a.txt").read_text() == "1 .5 .5 .2 .2\n"


def test_an_output_folder_that_is_or_leads_into_a_source_is_one_line_and_nothing_is_made(tmp_path):
    root = _dataset(tmp_path / "ds")
    (tmp_path / "alias").symlink_to(root / "images")
    with atomic_file.command():
        _protect(root)
        with pytest.raises(atomic_file.Refused, match=r"--project .*alias/train/runs: it lies inside .*images/train, "
                                                       r"the 'train' split's images, .* \(through a link: it leads to "):
            atomic_file.output_folder(tmp_path / "alias/train/runs", "--project")
        atomic_file.output_folder(root / "runs", "--project")  # beside the image and label folders: not read
    assert not (root / "images/train/runs").exists() and (root / "runs").is_dir()


def test_a_cache_may_lie_in_a_source_folder_never_on_a_source_file(tmp_path):
    root = _dataset(tmp_path / "ds")
    with atomic_file.command():
        _protect(root)
        atomic_file.protect([root / "images/train/a.jpg"], "an image of the 'train' split")
        atomic_file.write_bytes(root / "images/train/a.jpg.640.npy", b"NPY", cache=True)
        with pytest.raises(atomic_file.Refused, match="an image of the 'train' split"):
            atomic_file.write_bytes(root / "images/train/a.jpg", b"NPY", cache=True)
        with pytest.raises(atomic_file.Refused):
            atomic_file.remove_file(root / "images/train/a.jpg", cache=True)
    assert (root / "images/train/a.jpg").read_text() == "JPEG"


def test_a_source_link_is_a_source_itself_and_what_a_command_registers_ends_with_it(tmp_path):
    root = _dataset(tmp_path / "ds")
    (root / "images" / "val").symlink_to(root / "images" / "train")
    with atomic_file.command():
        atomic_file.protect([root / "images/val"], "the 'val' split's images", trees=True)
        with pytest.raises(atomic_file.Refused, match="the 'val' split's images"):
            atomic_file.link_file(root / "images/val", tmp_path)
        with pytest.raises(atomic_file.Refused):
            atomic_file.make_folder(root / "images/train/sub")
    atomic_file.make_folder(root / "images/train/sub")  # the command ended: its sources are free again
    assert (root / "images/val").is_symlink() and (root / "images/train/sub").is_dir()


def test_a_link_changed_while_a_file_is_written_stops_the_write(tmp_path):
    root = _dataset(tmp_path / "ds")
    out = tmp_path / "out"
    (out / "elsewhere").mkdir(parents=True)
    (tmp_path / "hop").symlink_to(out / "elsewhere")
    with atomic_file.command():
        _protect(root)
        for moved_to, line in ((out, "a link changed meanwhile"), (root / "images" / "train", "the 'train' split")):
            with pytest.raises(atomic_file.Refused, match=line), \
                    atomic_file.replacing(tmp_path / "hop" / "a.jpg") as temporary:
                temporary.write_text("written")
                (tmp_path / "hop").unlink()
                (tmp_path / "hop").symlink_to(moved_to)
            (tmp_path / "hop").unlink()
            (tmp_path / "hop").symlink_to(out / "elsewhere")
    assert (root / "images/train/a.jpg").read_text() == "JPEG" and not list((out / "elsewhere").iterdir())
    assert sorted(path.name for path in out.iterdir()) == ["elsewhere"]


def test_an_output_folder_under_a_file_or_named_like_one_is_one_line(tmp_path):
    (tmp_path / "file").write_text("mine")
    with pytest.raises(atomic_file.Refused.__mro__[1], match="--out .*file: is a file, not a folder"):
        atomic_file.output_folder(tmp_path / "file", "--out")
    with pytest.raises(atomic_file.Refused.__mro__[1], match="cannot be made"):
        atomic_file.output_folder(tmp_path / "file" / "deeper", "--out")
    assert (tmp_path / "file").read_text() == "mine" and os.listdir(tmp_path) == ["file"]
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")  # it was "is a file, not a folder"
    with pytest.raises(atomic_file.Refused.__mro__[1], match="--out .*a: is a link that leads back to itself"):
        atomic_file.output_folder(tmp_path / "a", "--out")


def test_commands_nest_and_each_forgets_only_its_own_sources(tmp_path):
    root = _dataset(tmp_path / "ds")
    with atomic_file.command():
        _protect(root)
        with atomic_file.command():  # an empty command inside, as a training run inside a study
            pass
        with atomic_file.command():
            atomic_file.protect([tmp_path / "other"], "another command's file")
        with pytest.raises(atomic_file.Refused, match="the data yaml"):
            atomic_file.write_text(root / "data.yaml", "names: []")
        atomic_file.write_text(tmp_path / "other", "written")  # its command ended
    assert (root / "data.yaml").read_text() == "train: images/train\n" and (tmp_path / "other").read_text() == "written"


def test_a_read_outside_any_command_protects_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(places, "_FRAMES", places._FRAMES[:1])  # as a notebook's Detector, outside every command
    atomic_file.protect([tmp_path], "a folder read outside any command", trees=True)
    assert atomic_file.write_text(tmp_path / "a.txt", "written").read_text() == "written"


def test_a_second_mount_of_a_source_folder_is_the_source(tmp_path):
    """A bind mount is no link: the folder's identity (device, inode) says it is the source."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30, check=False).returncode:
        pytest.skip("unshare -rm (a mount namespace of one's own) is not allowed here")
    root = _dataset(tmp_path / "ds")
    (tmp_path / "mounted").mkdir()
    before = fingerprints(root)
    code = ("from detect import atomic_file\n"
            "with atomic_file.command():\n"
            f"    atomic_file.protect([{str(root / 'images/train')!r}], 'the images', trees=True)\n"
            "    try:\n"
            f"        atomic_file.write_text({str(tmp_path / 'mounted/images/train/b.jpg')!r}, 'x')\n"
            "    except atomic_file.Refused as error:\n"
            "        print(error)\n")
    script = f"mount --bind {root} {tmp_path / 'mounted'} && {sys.executable} -c \"$0\""
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script, code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert done.stdout.startswith(f"cannot write {tmp_path / 'mounted/images/train/b.jpg'}: it lies inside "
                                  f"{tmp_path / 'mounted/images/train'}, the images"), done.stdout + done.stderr
    assert fingerprints(root) == before
