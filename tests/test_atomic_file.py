"""detect/atomic_file.py: a file is replaced whole, or left as it was with no temporary file behind."""

from __future__ import annotations

import pytest

from detect.atomic_file import TEMPORARY_SUFFIX, replacing


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
