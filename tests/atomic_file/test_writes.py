"""detect/atomic_file/writes.py: a file is replaced whole, or left as it was with no temporary file behind; a link or a
hard link at its place is replaced, never written through."""

from __future__ import annotations

import errno
import os

import pytest

from detect import atomic_file
from detect.atomic_file import TEMPORARY_SUFFIX, replacing
from tests.hostile import fingerprints


def test_the_new_contents_replace_the_file_at_the_end_of_the_block(tmp_path):
    path = tmp_path / "state.txt"
    path.write_text("old")
    with replacing(path) as temporary:
        temporary.write_text("new")
        assert path.read_text() == "old" and temporary.name.startswith(".") and temporary.name.endswith(
            TEMPORARY_SUFFIX)
    assert path.read_text() == "new" and [entry.name for entry in tmp_path.iterdir()] == ["state.txt"]


def test_an_error_in_the_block_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    path = tmp_path / "state.txt"
    path.write_text("old")
    with pytest.raises(OSError, match="disk full"), replacing(path) as temporary:
        temporary.write_text("half")
        raise OSError("disk full")
    assert path.read_text() == "old" and [entry.name for entry in tmp_path.iterdir()] == ["state.txt"]


def test_a_library_that_reads_the_suffix_gets_it_and_companions_are_renamed_with_the_file(tmp_path):
    with replacing(tmp_path / "model.xml", keep_suffix=True, companions=(".bin",)) as temporary:
        assert temporary.suffix == ".xml"
        temporary.write_text("graph")
        temporary.with_suffix(".bin").write_bytes(b"weights")
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["model.bin", "model.xml"]
    assert (tmp_path / "model.bin").read_bytes() == b"weights"


def test_a_link_or_a_hard_link_at_the_place_is_replaced_and_what_it_shares_keeps_its_bytes(tmp_path):
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "a.txt").write_text("source")
    out = tmp_path / "out"
    out.mkdir()
    (out / "soft.txt").symlink_to(kept / "a.txt")
    os.link(kept / "a.txt", out / "hard.txt")
    before = fingerprints(kept)
    for name in ("soft.txt", "hard.txt"):
        atomic_file.write_text(out / name, "written")
        assert not (out / name).is_symlink() and (out / name).read_text() == "written"
    atomic_file.copy_file(kept / "a.txt", out / "copy.txt")
    atomic_file.link_file(out / "copy.txt", kept / "a.txt")  # a link replaces the copy
    assert fingerprints(kept) == before and os.readlink(out / "copy.txt") == str(kept / "a.txt")


def test_a_long_name_gets_a_temporary_within_the_file_systems_limit(tmp_path):
    name = "é" * 120 + ".jpg"  # 244 bytes of UTF-8
    assert atomic_file.write_bytes(tmp_path / name, b"x").read_bytes() == b"x"


def test_appending_writes_the_file_anew_and_removing_a_link_keeps_its_target(tmp_path):
    log = tmp_path / "results.csv"
    atomic_file.append_text(log, "a\n")
    atomic_file.append_text(log, "b\n")
    assert log.read_text() == "a\nb\n"
    (tmp_path / "link").symlink_to(log)
    atomic_file.remove_file(tmp_path / "link")
    atomic_file.remove_file(tmp_path / "missing")
    assert not (tmp_path / "link").exists() and log.read_text() == "a\nb\n"


def test_publish_names_a_file_once_however_many_finish_it(tmp_path):
    for number in (1, 2):
        (tmp_path / f"draft{number}").write_text(str(number))
    assert atomic_file.publish(tmp_path / "draft1", tmp_path / "store")
    assert not atomic_file.publish(tmp_path / "draft2", tmp_path / "store")
    assert (tmp_path / "store").read_text() == "1"


def test_a_write_the_file_system_refuses_is_one_line_and_still_an_oserror(tmp_path):
    (tmp_path / "taken").mkdir()  # a folder where a file goes
    (tmp_path / "file").write_text("mine")
    with pytest.raises(atomic_file.WriteError, match=r"^cannot write .*taken \(Is a directory\)$") as raised:
        atomic_file.write_text(tmp_path / "taken", "x")
    assert isinstance(raised.value, OSError) and raised.value.errno == errno.EISDIR
    with pytest.raises(atomic_file.WriteError, match=r"^cannot write .*file/under \(Not a directory\)$"):
        atomic_file.make_folder(tmp_path / "file" / "under")
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["file", "taken"]


def test_a_stream_is_written_in_place_and_what_was_at_its_place_removed_first(tmp_path):
    kept = tmp_path / "kept.txt"
    kept.write_text("source")
    (tmp_path / "soft.txt").symlink_to(kept)
    os.link(kept, tmp_path / "hard.txt")
    for name in ("soft.txt", "hard.txt", "new.txt"):
        with atomic_file.open_stream(tmp_path / name) as stream:
            stream.write("1,1\n")
            stream.flush()
            assert (tmp_path / name).read_text() == "1,1\n"  # each flushed line there while it is written
        assert not (tmp_path / name).is_symlink()
    assert kept.read_text() == "source" and os.stat(kept).st_nlink == 1
