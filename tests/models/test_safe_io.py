"""Our checkpoints: atomic save, weights_only load, clear errors for files that are not ours."""

from __future__ import annotations

import errno
import os
import random
import stat
import subprocess
from pathlib import Path

import pytest
import torch

from detect.errors import UserError
from detect.models.safe_io import load_checkpoint, save_checkpoint
from tests.shared_data import YOLOV5N, needs_shared


def test_round_trip(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 2)
    payload = {"model": model.state_dict(), "epoch": 4, "names": ["cat", "dog"], "best": 0.25, "hyp": {"lr0": 0.01}}
    path = save_checkpoint(tmp_path / "runs" / "last.pt", payload)
    loaded = load_checkpoint(path)
    assert loaded["epoch"] == 4 and loaded["names"] == ["cat", "dog"] and loaded["hyp"] == {"lr0": 0.01}
    assert torch.equal(loaded["model"]["weight"], model.weight.detach())
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"]  # no temp file left behind


def test_modules_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="state_dict"):
        save_checkpoint(tmp_path / "bad.pt", {"model": torch.nn.Linear(2, 2)})
    with pytest.raises(TypeError, match="nested.0"):
        save_checkpoint(tmp_path / "bad.pt", {"nested": {0: [torch.nn.ReLU()]}})
    assert not any(tmp_path.iterdir())


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch) -> None:
    path = save_checkpoint(tmp_path / "last.pt", {"epoch": 1})

    def broken_save(*args, **kwargs):
        raise OSError("an I/O error")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="an I/O error"):
        save_checkpoint(path, {"epoch": 2})
    monkeypatch.undo()
    assert load_checkpoint(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def _fills_the_disk_after(size: int, error: int):
    """torch.save writing `size` bytes, then failing as a full disk (ENOSPC) or a full quota (EDQUOT) does."""

    def save(payload, file) -> None:
        file.write(b"\0" * size)
        raise OSError(error, os.strerror(error))

    return save


@pytest.mark.parametrize("failing", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_is_one_line_naming_the_folder_and_the_space(tmp_path: Path, monkeypatch, failing) -> None:
    path = save_checkpoint(tmp_path / "weights" / "last.pt", {"epoch": 1})
    payload = {"epoch": 2, "model": {"weight": torch.zeros(1024, 1024)}}  # 4 MB of tensors
    monkeypatch.setattr(torch, "save", _fills_the_disk_after(1000, failing))
    with pytest.raises(UserError) as raised:
        save_checkpoint(path, payload)
    message = str(raised.value)
    assert message.startswith(f"no space left in {path.parent} for last.pt: it needs about 4.0 MB, ")
    assert message.endswith("MB are free; the previous last.pt is unchanged (free some space, then resume)")
    monkeypatch.undo()
    assert load_checkpoint(path)["epoch"] == 1
    assert [entry.name for entry in path.parent.iterdir()] == ["last.pt"]  # the partial temp file is gone


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_checkpoints_follow_the_umask(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        path = save_checkpoint(tmp_path / f"{umask:o}.pt", {"epoch": 1})
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


class Foreign:
    """A class weights_only loading does not know."""


def test_foreign_files_are_user_errors(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.pt"
    torch.save({"model": Foreign()}, foreign)
    with pytest.raises(UserError) as refused:
        load_checkpoint(foreign)
    # One line naming what was refused; not torch's paragraph, no yolov5 hint for a class that is not yolov5's.
    assert str(refused.value) == (f"{foreign} is not a detect checkpoint: its pickle asks for "
                                  f"{__name__}.Foreign, which is refused")
    noise = tmp_path / "noise.pt"
    for seed in range(5):
        noise.write_bytes(random.Random(seed).randbytes(1000))
        with pytest.raises(UserError, match="not a readable checkpoint"):
            load_checkpoint(noise)
    noise.write_bytes(b"\x80\x02garbage")
    with pytest.raises(UserError, match="not a readable checkpoint"):
        load_checkpoint(noise)
    noise.write_bytes(b"PK\x03\x04" + random.Random(0).randbytes(1000))  # what torch.load takes for a zip
    with pytest.raises(UserError, match="not a readable checkpoint \\(a damaged zip archive"):
        load_checkpoint(noise)
    with pytest.raises(UserError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")
    listed = tmp_path / "list.pt"
    torch.save([1, 2], listed)
    with pytest.raises(UserError, match="not a dict"):
        load_checkpoint(listed)


@needs_shared
def test_a_yolov5_file_as_a_checkpoint_names_its_classes_and_the_flag_that_reads_it() -> None:
    with pytest.raises(UserError, match=r"asks for models\.common\.\w+, .*, \.\.\., which is refused "
                                        r"\(a yolov5 \.pt\? give it as --weights\)$"):
        load_checkpoint(YOLOV5N)


class Calls:
    """Unpickling this calls `target(*args)`."""

    def __init__(self, target, *args) -> None:
        self.target, self.args = target, args

    def __reduce__(self):
        return self.target, self.args


def test_refused_callables_are_named_as_python_3_knows_them(tmp_path: Path) -> None:
    path = tmp_path / "calls.pt"
    # Protocol 2 writes these as posix.system, __builtin__.eval and commands.Popen.
    torch.save({"a": Calls(os.system, "true"), "b": Calls(eval, "1"), "c": Calls(subprocess.Popen, "true")}, path)
    with pytest.raises(UserError, match="asks for builtins.eval, os.system, subprocess.Popen, which is refused$"):
        load_checkpoint(path)
