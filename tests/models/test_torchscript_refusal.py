"""A TorchScript file given as weights is refused before any loader could run the code it holds.

torch.load hands a TorchScript archive to torch.jit.load, which runs each scripted class's __setstate__. The
trap below is such a program: its __setstate__ maps its marker path with torch.from_file(shared=True), which
creates that file, so "the marker exists" means "code from the file ran". TorchScript has no open() or os
module; from_file's shared mapping is the file write it can do. (The result is kept in an attribute because
the TorchScript compiler drops calls whose result nobody reads.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from detect import predict, train, val
from detect.errors import UserError
from detect.models.safe_io import load_checkpoint, read_yolov5_checkpoint
from detect.models.weights import load_model
from tests.data.helpers import write_sample, write_yaml


class Trap(torch.nn.Module):
    """Creates the file at `marker` whenever it is loaded by torch.jit.load."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.mapped = 0

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images

    @torch.jit.export
    def __getstate__(self) -> tuple[str, bool]:
        return self.marker, self.training

    @torch.jit.export
    def __setstate__(self, state: tuple[str, bool]) -> None:
        self.marker, self.training = state
        self.mapped = torch.from_file(state[0], shared=True, size=1, dtype=torch.uint8).numel()


@pytest.fixture
def trap(tmp_path: Path) -> tuple[Path, Path]:
    """(the TorchScript file, its marker); proven to create the marker when torch.load reads it."""
    marker, path = tmp_path / "executed", tmp_path / "best.pt"
    torch.jit.save(torch.jit.script(Trap(str(marker))), str(path))
    with pytest.warns(UserWarning, match="TorchScript"):
        torch.load(path, weights_only=False)
    assert marker.exists()  # what an unguarded reader does
    marker.unlink()
    return path, marker


@pytest.mark.parametrize("reader", [load_model, load_checkpoint, read_yolov5_checkpoint])
def test_readers_refuse_it_unrun(trap: tuple[Path, Path], reader: Callable[[Path], object]) -> None:
    path, marker = trap
    with pytest.raises(UserError) as refused:
        reader(path)
    assert str(refused.value).startswith(f"{path} is a TorchScript program, not a checkpoint: TorchScript is code")
    assert "\n" not in str(refused.value)
    assert not marker.exists()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A one-image, 3-class dataset."""
    write_sample(tmp_path / "data", "train", "im0", 64, 64, [(10, 10, 40, 40)])
    return write_yaml(tmp_path / "data")


@pytest.mark.parametrize("entry, options", [
    (val.main, ["--data", "data/data.yaml", "--weights"]),
    (predict.main, ["--source", "data/images/train", "--weights"]),
    (train.main, ["--data", "data/data.yaml", "--epochs", "1", "--weights"]),
    (train.main, ["--resume"]),
], ids=["val", "predict", "train", "train-resume"])
def test_val_predict_and_train_refuse_it_in_one_line(trap, data, tmp_path, monkeypatch, capsys, entry, options):
    path, marker = trap
    monkeypatch.chdir(tmp_path)
    code = entry([*options, str(path), "--imgsz", "64", "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "is a TorchScript program" in err, err
    assert not marker.exists()
    assert not (tmp_path / "runs").exists()
