"""A disk that fills up during a save ends the run with one line naming the folder and the space, exit 2, and the
last.pt before it whole and resumable."""

from __future__ import annotations

import errno
import os

import torch

from detect import train
from detect.training.resume import TrainingCheckpoint
from tests.training.helpers import tiny_dataset, train_args


def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_last_checkpoint(tmp_path, monkeypatch, capsys):
    data = tiny_dataset(tmp_path / "data")
    save, saves = torch.save, []

    def fills_up_at_the_third(payload, file) -> None:  # epoch 1 writes last.pt and best.pt, epoch 2 last.pt
        saves.append(1)
        if len(saves) == 3:
            file.write(b"\0" * 4096)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        save(payload, file)

    monkeypatch.setattr(torch, "save", fills_up_at_the_third)
    assert train.main(train_args(data, tmp_path / "runs", "--noval", epochs=2)) == 2
    weights = tmp_path / "runs" / "exp" / "weights"
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith(f"error: no space left in {weights} for last.pt: it needs about "), lines[-1]
    assert lines[-1].endswith("MB are free; the previous last.pt is unchanged (free some space, then resume)")
    assert not any("Traceback" in line for line in lines)
    monkeypatch.undo()
    last = TrainingCheckpoint.load(weights / "last.pt")
    assert last.resumable and last.counters.epoch == 1
    assert sorted(path.name for path in weights.iterdir()) == ["best.pt", "last.pt"]
