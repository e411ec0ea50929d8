"""Import of yolov5 checkpoints: the real release file, and pickles that must be refused unexecuted."""

from __future__ import annotations

import io
import os
import pathlib
import pickle
import random
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from detect.errors import UserError
from detect.models.safe_io import load_checkpoint, read_yolov5_checkpoint
from detect.models.weights import load_model
from detect.models.yolov5_pickle import RestrictedUnpickler
from tests.models.yolov5_standins import standin_checkpoint
from tests.models.yolov5_task_standins import task_checkpoint
from tests.shared_data import YOLOV5N, needs_shared


@needs_shared
def test_release_checkpoint_reads_tensors_names_yaml_stride() -> None:
    checkpoint = read_yolov5_checkpoint(YOLOV5N)
    names = list(checkpoint.state_dict)
    # 349 = every nn.Module.state_dict entry, BN running stats, num_batches_tracked and Detect's anchors.
    assert len(names) == 349
    assert names[0] == "model.0.conv.weight" and names[-1] == "model.24.m.2.bias"
    assert "model.24.anchors" in names and "model.0.bn.num_batches_tracked" in names
    learnable = [n for n in names if not n.endswith(("running_mean", "running_var", "num_batches_tracked", "anchors"))]
    # The exact yolov5n parameter count (docs/yolov5.md, "Parameter counts and FLOPs").
    assert sum(checkpoint.state_dict[n].numel() for n in learnable) == 1_872_157
    tensors = checkpoint.state_dict.values()
    assert all(isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter) for t in tensors)
    assert len(checkpoint.names) == 80 and checkpoint.names[0] == "person" and checkpoint.nc == 80
    assert checkpoint.yaml["depth_multiple"] == 0.33 and checkpoint.yaml["width_multiple"] == 0.25
    assert {"backbone", "head", "anchors"} <= set(checkpoint.yaml)
    assert checkpoint.stride == [8.0, 16.0, 32.0]
    # Detect's anchors buffer is stored in grid units: pixels / stride (P3 (10,13) / 8).
    assert checkpoint.state_dict["model.24.anchors"][0, 0].float().tolist() == [1.25, 1.625]


class WritesMarker:
    """An object whose unpickling would call os.system to create a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_runs_code_is_refused_and_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    path = tmp_path / "evil.pt"
    torch.save({"model": WritesMarker(marker), "weights": torch.zeros(2)}, path)
    with pytest.raises(UserError, match="system"):
        read_yolov5_checkpoint(path)
    assert not marker.exists()
    # The proof that the file really would have run the command with an unrestricted loader.
    torch.load(path, weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("target", [eval, exec, getattr, __import__])
def test_builtin_callables_are_refused(tmp_path: Path, target) -> None:
    class Calls:
        def __reduce__(self):
            return (target, ("1",))

    path = tmp_path / "builtin.pt"
    torch.save({"model": Calls()}, path)
    # torch.save writes pickle protocol 2, which spells the module __builtin__: named as Python 3 does.
    with pytest.raises(UserError, match=f"asks for builtins\\.{target.__name__}, which is not allowed"):
        read_yolov5_checkpoint(path)


def test_legacy_pickle_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    path = tmp_path / "legacy.pt"
    torch.save({"model": WritesMarker(marker)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(UserError):
        read_yolov5_checkpoint(path)
    assert not marker.exists()


def test_files_that_are_not_checkpoints(tmp_path: Path) -> None:
    noise = tmp_path / "noise.pt"
    for seed in range(20):  # random bytes fail in many ways (one seed raised OverflowError): all are one error
        noise.write_bytes(random.Random(seed).randbytes(4096))
        with pytest.raises(UserError, match="not a readable PyTorch checkpoint"):
            read_yolov5_checkpoint(noise)
    with pytest.raises(UserError, match="not found"):
        read_yolov5_checkpoint(tmp_path / "missing.pt")
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(3)}, plain)
    with pytest.raises(UserError, match="not a yolov5 checkpoint"):
        read_yolov5_checkpoint(plain)
    broken = tmp_path / "broken.pt"
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02garbage")
    with pytest.raises(UserError):
        read_yolov5_checkpoint(broken)


class Calls:
    """Unpickling this calls `target(*args)`: what a malicious field inside a real-looking checkpoint does."""

    def __init__(self, target, *args) -> None:
        self.target, self.args = target, args

    def __reduce__(self):
        return self.target, self.args


def _refusals(marker: Path, inner: Path) -> dict[str, Calls]:
    """Each code-running call, by the name the refusal must give; every one would create `marker`."""
    return {
        "os.system": Calls(os.system, f"touch {marker}"),
        "builtins.eval": Calls(eval, f"open({str(marker)!r}, 'w')"),
        "subprocess.Popen": Calls(subprocess.Popen, ["touch", str(marker)]),
        "torch.serialization.load": Calls(torch.load, str(inner)),  # a second pickle that would run os.system
        "numpy.load": Calls(np.load, str(inner)),
    }


@pytest.mark.parametrize("name", ["os.system", "builtins.eval", "subprocess.Popen", "torch.serialization.load",
                                  "numpy.load"])
def test_code_inside_a_yolov5_checkpoint_is_refused_and_not_run(tmp_path: Path, name: str) -> None:
    marker, inner = tmp_path / "executed", tmp_path / "inner.pt"
    torch.save({"model": WritesMarker(marker)}, inner)
    path = tmp_path / "last.pt"
    # A v7.0 train.py checkpoint (placeholders, numpy values, PosixPaths) with one field that runs code.
    standin_checkpoint(path, "v7.0", extra_fields={"hook": _refusals(marker, inner)[name]})
    # Protocol 2 spells some modules as Python 2 did (commands.Popen, __builtin__.eval; os.system is posix.system):
    # the refusal names them as a user knows them.
    with pytest.raises(UserError, match=f"asks for {name}, which is not allowed") as refused:
        load_model(path)
    assert "\n" not in str(refused.value)
    assert not marker.exists()


@pytest.mark.parametrize("target", [eval, pathlib.Path.write_text])
def test_protocol_4_names_are_refused_too(tmp_path: Path, target) -> None:
    path = tmp_path / "p4.pt"
    torch.save({"model": Calls(target, "x")}, path, pickle_protocol=4)
    expected = "builtins.eval" if target is eval else "pathlib.Path.write_text"
    with pytest.raises(UserError, match=f"asks for {expected}, which is not allowed"):
        read_yolov5_checkpoint(path)


def test_paths_of_either_flavour_become_strings() -> None:
    windows = pickle.dumps(pathlib.PureWindowsPath("C:/runs/train"), protocol=2)
    windows = windows.replace(b"PureWindowsPath", b"WindowsPath")  # what a Windows run's WindowsPath pickles as
    posix = pickle.dumps(pathlib.PosixPath("/data/runs"), protocol=2)
    assert RestrictedUnpickler(io.BytesIO(windows)).load() == "C:\\runs\\train"
    assert RestrictedUnpickler(io.BytesIO(posix)).load() == "/data/runs"


def test_only_latin1_spells_bytes() -> None:
    # Protocol 2 writes bytes as _codecs.encode(text, 'latin1'); any other codec is refused before it runs.
    rot13 = b"\x80\x02c_codecs\nencode\nX\x03\x00\x00\x00abcX\x05\x00\x00\x00rot13\x86R."
    with pytest.raises(UserError, match="_codecs.encode with 'rot13'"):
        RestrictedUnpickler(io.BytesIO(rot13)).load()
    assert RestrictedUnpickler(io.BytesIO(pickle.dumps(np.arange(3), protocol=2))).load().tolist() == [0, 1, 2]


@pytest.mark.parametrize("module, name, known", [
    ("__builtin__", "eval", "builtins.eval"), ("__builtin__", "xrange", "builtins.range"),
    ("posix", "system", "os.system"), ("nt", "system", "os.system"), ("commands", "Popen", "subprocess.Popen"),
])
def test_python_2_spellings_are_refused_under_their_python_3_names(module, name, known):
    # A protocol 2 pickle calling module.name("1"): the names a Python 3 pickler writes (or a Windows one: nt).
    calls = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"X\x01\x00\x00\x001\x85R."
    with pytest.raises(UserError, match=f"asks for {known}, which is not allowed"):
        RestrictedUnpickler(io.BytesIO(calls)).load()


@pytest.mark.parametrize("task, model_class", [("segmentation", "models.yolo.SegmentationModel"),
                                               ("classification", "models.yolo.ClassificationModel")])
def test_other_yolov5_tasks_are_named(tmp_path: Path, task: str, model_class: str) -> None:
    path = tmp_path / "best.pt"
    task_checkpoint(path, task)
    expected = f"{path} is a yolov5 {task} checkpoint ({model_class}): detect loads detection checkpoints only"
    for reader in (load_model, load_checkpoint):  # --weights, and --resume
        with pytest.raises(UserError) as refused:
            reader(path)
        assert str(refused.value) == expected
