"""Predict's --source with special and missing files (issue 43, items 2 and 5): a FIFO, socket or device is never
opened, a link loop never followed; inside a folder, glob or list they are skipped in one line naming the first few,
and the rest is predicted; a source with nothing readable is exit 2 in one line with the count and the first path.
The cases that hung or flooded before run the CLI in a subprocess with a time limit and a memory cap."""

from __future__ import annotations

import glob
import logging
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from detect.data.storage.files import BROKEN_LINK, LINK_LOOP, MISSING, NOT_REGULAR
from detect.errors import UserError
from detect.inference.media import list_sources
from tests.user_run import run_cli


def image(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.full((32, 40, 3), 90, np.uint8))
    return path


def hostile_folder(folder: Path) -> list[Path]:
    """Two images beside a self-link, a broken link, a FIFO named like an image and two links to the folder itself;
    returns the images."""
    good = [image(folder / "a.jpg"), image(folder / "b.png")]
    (folder / "self.jpg").symlink_to("self.jpg")
    (folder / "broken.jpg").symlink_to("gone.jpg")
    os.mkfifo(folder / "fifo.jpg")
    for name in ("loop1", "loop2"):
        (folder / name).symlink_to(".")
    return good


def test_a_folder_skips_special_files_in_one_line_and_keeps_the_rest(tmp_path, caplog):
    good = hostile_folder(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert list_sources(str(tmp_path)) == good
    (line,) = caplog.messages
    assert line == (f"--source {tmp_path}: 3 of 5 skipped (1 {BROKEN_LINK}, 1 {NOT_REGULAR} (FIFO), 1 {LINK_LOOP}): "
                    f"{tmp_path / 'broken.jpg'}: {BROKEN_LINK}, {tmp_path / 'fifo.jpg'}: {NOT_REGULAR} (FIFO), "
                    f"{tmp_path / 'self.jpg'}: {LINK_LOOP}")


def test_a_list_with_some_paths_missing_names_the_first_few_and_keeps_the_rest(tmp_path, caplog):
    good = image(tmp_path / "good.jpg")
    listed = tmp_path / "list.txt"
    listed.write_text("".join(f"missing{index}.jpg\n" for index in range(5)) + "good.jpg\n")
    with caplog.at_level(logging.WARNING):
        assert list_sources(str(listed)) == [good]
    named = ", ".join(f"{tmp_path / f'missing{index}.jpg'}: {MISSING}" for index in range(3))
    assert caplog.messages == [f"--source {listed}: 5 of 6 skipped (5 {MISSING}): {named} and 2 more"]


def test_a_source_with_nothing_readable_is_one_line(tmp_path):
    listed = tmp_path / "list.txt"
    listed.write_text("".join(f"/nowhere/{index}.jpg\n" for index in range(10_000)))
    with pytest.raises(UserError) as raised:
        list_sources(str(listed))
    assert str(raised.value) == (f"--source {listed}: none of its 10000 files can be read (10000 {MISSING}; the "
                                 "first: /nowhere/0.jpg)")
    os.mkfifo(tmp_path / "only.jpg")
    for source, kind in ((tmp_path / "only.jpg", "FIFO"), ("/dev/null", "character device")):
        with pytest.raises(UserError) as raised:
            list_sources(str(source))
        assert str(raised.value) == f"--source {source}: {NOT_REGULAR} ({kind})"
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no images or videos in it"):  # as before: nothing to do is an error
        list_sources(str(tmp_path / "empty"))


@pytest.mark.parametrize("pattern", ["**/*.jpg", "*/**/*.png", "a/**", "**/b/*.jpg", "a/**/*.jpg", "a/*/c.jpg",
                                     "**/.hidden/*.jpg", "*.png"])
def test_a_glob_lists_what_pythons_glob_lists(tmp_path, monkeypatch, pattern):
    for name in ("x.jpg", "y.png", "a/x.jpg", "a/b/x.jpg", "a/b/c.jpg", "a/b/y.png", "b/x.jpg", "a/.hidden/x.jpg",
                 ".hidden/z.jpg", "a/b/c/d/e.jpg", "notes.txt"):
        image(tmp_path / name) if not name.endswith(".txt") else (tmp_path / name).write_text("not media")
    monkeypatch.chdir(tmp_path)
    expected = sorted(Path(match) for match in glob.glob(pattern, recursive=True)
                      if Path(match).is_file() and not match.endswith(".txt"))
    assert expected and list_sources(pattern) == expected
    assert list_sources(str(tmp_path / pattern)) == [tmp_path / path for path in expected]


def predict_args(weights: Path, source: Path | str, project: Path) -> list[str]:
    return ["--weights", str(weights), "--source", str(source), "--device", "cpu", "--imgsz", "64",
            "--project", str(project)]


@pytest.mark.parametrize("name, message", [("camera.jpg", f"{NOT_REGULAR} (FIFO)"),
                                           ("clip.mp4", f"{NOT_REGULAR} (FIFO)"),
                                           ("cameras.streams", f"cannot read it ({NOT_REGULAR} (FIFO))")])
def test_a_fifo_as_the_only_source_is_exit_2_in_one_line(weights, tmp_path, name, message):
    """Case 8: hung for ever (cv2.imread, FFmpeg or read_text opened the FIFO and waited for a writer)."""
    os.mkfifo(tmp_path / name)
    finished = run_cli("detect.predict", *predict_args(weights, tmp_path / name, tmp_path / "runs"), timeout=60,
                       merge_output=True)
    assert finished.returncode == 2
    assert finished.stdout == f"error: --source {tmp_path / name}: {message}\n"
    assert not (tmp_path / "runs").exists()


def test_a_list_of_missing_paths_is_exit_2_in_one_line(weights, tmp_path):
    """Case 11: exit 0 and 30,003 lines (a decoder warning, a skipped line and its repeat for each path)."""
    listed = tmp_path / "list.txt"
    listed.write_text("".join(f"/nowhere/{index}.jpg\n" for index in range(10_000)))
    finished = run_cli("detect.predict", *predict_args(weights, listed, tmp_path / "runs"), timeout=120,
                       merge_output=True)
    assert finished.returncode == 2
    assert finished.stdout == (f"error: --source {listed}: none of its 10000 files can be read (10000 {MISSING}; the "
                               "first: /nowhere/0.jpg)\n")


def test_special_and_missing_files_in_a_folder_glob_and_list_are_skipped_and_the_rest_predicted(weights, tmp_path):
    """A list naming a FIFO hung; a '**' glob over a folder with two links to itself lists 2^40 paths in Python's
    glob; the folder's FIFO was silently left out."""
    folder = tmp_path / "images"
    good = hostile_folder(folder)
    listed = tmp_path / "list.txt"
    listed.write_text("images/a.jpg\nimages/fifo.jpg\nmissing.jpg\nimages/b.png\n")
    for source, skipped in ((folder, 3), (f"{folder}/**/*.*", 3), (listed, 2)):
        project = tmp_path / f"runs{len(list(tmp_path.glob('runs*')))}"
        finished = run_cli("detect.predict", *predict_args(weights, source, project), timeout=180, merge_output=True)
        assert finished.returncode == 0 and "Traceback" not in finished.stdout, finished.stdout
        lines = finished.stdout.splitlines()
        assert len([line for line in lines if " skipped (" in line]) == 1, finished.stdout
        assert f"--source {source}: {skipped} of {skipped + 2} skipped" in finished.stdout
        assert sorted(path.name for path in (project / "exp").iterdir()) == [path.name for path in good]
