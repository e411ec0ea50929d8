"""files.py: which paths may be opened (regular files only), and the folder walk that follows links but never loops,
naming each broken or looping link, unreadable folder and special file it skips."""

from __future__ import annotations

import contextlib
import inspect
import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from detect.data.images.load import read_image
from detect.data.labels.check import check_image
from detect.data.storage import files
from detect.data.storage.files import (
    BROKEN_LINK,
    KERNEL_FOLDER,
    LINK_LOOP,
    MISSING,
    NOT_REGULAR,
    SEEN_FOLDER,
    UNREADABLE_FOLDER,
    file_problem,
    require_file,
    walk,
)
from detect.errors import UserError
from detect.inference import detector
from detect.inference.media import load_image


def jpeg(name: str) -> bool:
    return name.endswith(".jpg")


def touch(*paths: Path) -> None:
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


def test_file_problem_names_what_cannot_be_opened(tmp_path):
    touch(tmp_path / "good.jpg")
    (tmp_path / "loop.jpg").symlink_to("loop.jpg")
    (tmp_path / "broken.jpg").symlink_to("gone.jpg")
    (tmp_path / "linked.jpg").symlink_to("good.jpg")
    os.mkfifo(tmp_path / "fifo.jpg")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "socket.jpg"))
        problems = {path.name: file_problem(path) for path in tmp_path.iterdir()}
    assert problems == {"good.jpg": None, "linked.jpg": None, "loop.jpg": LINK_LOOP, "broken.jpg": BROKEN_LINK,
                        "fifo.jpg": f"{NOT_REGULAR} (FIFO)", "socket.jpg": f"{NOT_REGULAR} (socket)"}
    assert file_problem(tmp_path / "missing.jpg") == MISSING
    assert file_problem(tmp_path) == f"{NOT_REGULAR} (folder)"
    assert file_problem("/dev/null") == f"{NOT_REGULAR} (character device)"
    with pytest.raises(OSError, match=r"not a regular file \(FIFO\)"):
        require_file(tmp_path / "fifo.jpg")


def test_walk_keeps_path_order_and_follows_links_to_files_and_folders(tmp_path):
    root, elsewhere = tmp_path / "images", tmp_path / "elsewhere"
    touch(root / "a" / "b" / "c.jpg", root / "a" / "b.jpg", root / "z.jpg", root / "notes.txt", elsewhere / "d.jpg")
    (root / "linked").symlink_to(elsewhere)  # users link datasets
    (root / "one.jpg").symlink_to(root / "z.jpg")
    listing = walk(str(root), jpeg)
    assert [Path(path).relative_to(root).as_posix() for path in listing.files] == [
        "a/b/c.jpg", "a/b.jpg", "linked/d.jpg", "one.jpg", "z.jpg"]  # as Path compares: part by part
    assert listing.skipped == []


def test_walk_names_loops_broken_links_and_special_files_once_and_lists_the_rest(tmp_path):
    root = tmp_path / "images" / "train"
    touch(root / "good.jpg", root / "sub" / "deep.jpg")
    (root / "self.jpg").symlink_to("self.jpg")  # a.jpg -> a.jpg
    (root / "parent").symlink_to("..")  # to a folder above the walk's root
    (root / "here").symlink_to(".")
    (root / "sub" / "top").symlink_to(root)  # to a folder on the current path
    (root / "gone").symlink_to("nothing")
    os.mkfifo(root / "fifo.jpg")
    os.mkfifo(root / "fifo.txt")  # not wanted: not named
    listing = walk(str(root), jpeg)
    assert listing.files == [str(root / "good.jpg"), str(root / "sub" / "deep.jpg")]
    assert sorted((Path(path).relative_to(root).as_posix(), why) for path, why in listing.skipped) == [
        ("fifo.jpg", f"{NOT_REGULAR} (FIFO)"), ("gone", BROKEN_LINK), ("here", LINK_LOOP), ("parent", LINK_LOOP),
        ("self.jpg", LINK_LOOP), ("sub/top", LINK_LOOP)]


def test_a_folder_reached_by_two_links_is_listed_once(tmp_path):
    touch(tmp_path / "shared" / "x.jpg")
    root = tmp_path / "images"
    root.mkdir()
    (root / "a").symlink_to(tmp_path / "shared")
    (root / "b").symlink_to(tmp_path / "shared")
    listing = walk(str(root), jpeg)
    assert listing.files == [str(root / "a" / "x.jpg")] and listing.skipped == [(str(root / "b"), SEEN_FOLDER)]


def test_two_links_to_the_parent_end_at_once(tmp_path):
    """Python's glob and an unguarded walk follow these until the path is too long: 2^40 paths."""
    touch(tmp_path / "x.jpg")
    for name in ("a", "b"):
        (tmp_path / name).symlink_to(".")
    assert walk(str(tmp_path), jpeg).files == [str(tmp_path / "x.jpg")]


def test_an_unreadable_folder_is_named_and_the_rest_is_walked(tmp_path, monkeypatch):
    # The tests run as root, whom permission bits do not stop: the folder's listing is made to fail as it would
    # for another user (a chmod 000 folder) or for root in /proc/1/cwd of another namespace.
    touch(tmp_path / "closed" / "hidden.jpg", tmp_path / "open" / "seen.jpg")
    scandir = os.scandir

    def refusing(path):
        if Path(path) == tmp_path / "closed":
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(files.os, "scandir", refusing)
    listing = walk(str(tmp_path), jpeg)
    assert listing.files == [str(tmp_path / "open" / "seen.jpg")]
    assert listing.skipped == [(str(tmp_path / "closed"), f"{UNREADABLE_FOLDER} (Permission denied)")]


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="no /proc here")
def test_kernel_folders_are_not_walked(tmp_path):
    (tmp_path / "proc").symlink_to("/proc")
    assert walk("/proc", jpeg).skipped == [("/proc", KERNEL_FOLDER)]
    assert walk(str(tmp_path), jpeg).skipped == [(str(tmp_path / "proc"), KERNEL_FOLDER)]


def test_a_walk_past_its_limit_stops_in_one_line(tmp_path):
    touch(*(tmp_path / "sub" / f"{index}.jpg" for index in range(5)))
    assert len(walk(str(tmp_path), jpeg, limit=6).files) == 5
    with pytest.raises(UserError) as raised:
        walk(str(tmp_path), jpeg, limit=5)
    assert str(raised.value) == f"{tmp_path}: more than 5 entries under it, the walk stopped (is it the dataset's folder?)"


def test_a_tree_deeper_than_the_recursion_limit_is_walked(tmp_path):
    deep = tmp_path.joinpath(*["d"] * 300)
    deep.mkdir(parents=True)
    touch(deep / "x.jpg")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 100)  # a walk with a frame per folder would fail here
    try:
        found = walk(str(tmp_path), jpeg).files
    finally:
        sys.setrecursionlimit(limit)
    assert found == [str(deep / "x.jpg")]


def test_a_walk_that_is_not_recursive_lists_one_folder(tmp_path):
    touch(tmp_path / "a.jpg", tmp_path / "sub" / "b.jpg")
    os.mkfifo(tmp_path / "c.jpg")
    listing = walk(str(tmp_path), jpeg, recursive=False)
    assert listing.files == [str(tmp_path / "a.jpg")]
    assert listing.skipped == [(str(tmp_path / "c.jpg"), f"{NOT_REGULAR} (FIFO)")]


@contextlib.contextmanager
def released_if_opened(fifo: Path, after: float = 10.0) -> Iterator[None]:
    """If the code under test opens `fifo` (it must not), a writer frees it every `after` s: the test then fails
    instead of hanging."""
    stop = threading.Event()

    def free() -> None:
        while not stop.wait(after):
            os.close(os.open(fifo, os.O_WRONLY))  # waits for a reader, then gives it an end of file

    thread = threading.Thread(target=free, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        while thread.is_alive():  # its writer may wait for a reader that never came: be that reader
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
            thread.join(0.1)


def test_every_reader_of_a_user_image_refuses_a_fifo_without_opening_it(tmp_path):
    fifo = tmp_path / "x.jpg"
    os.mkfifo(fifo)
    with released_if_opened(fifo):
        with pytest.raises(OSError, match=r"not a regular file \(FIFO\)"):
            read_image(fifo)  # training and val loaders, hub, annotate
        with pytest.raises(OSError, match=r"not a regular file \(FIFO\)"):
            load_image(fifo)  # the Detector API
        with pytest.raises(UserError, match=r"x.jpg: OSError: not a regular file \(FIFO\)"):
            detector._as_array(str(fifo))
        result = check_image(str(fifo), None, 1)  # the label check
    assert result.skipped == f"{NOT_REGULAR} (FIFO)" and result.details == [f"{fifo}: {NOT_REGULAR} (FIFO)"]
