"""The one table of model formats: every runtime says its format's name, a path's format is found by its suffix or
folder, and export's --include choices and benchmarks' rows are the table's, in their CLI orders."""

from __future__ import annotations

import dataclasses

import pytest

from detect import benchmarks, export
from detect.inference.model import FORMATS, PYTORCH, benchmarked_names, exported_names, format_named, format_of
from detect.inference.runtimes.ensemble_model import EnsembleInference


def test_every_runtime_says_its_formats_name_and_names_and_suffixes_are_unique():
    runnable = [model_format for model_format in FORMATS if model_format.runtime is not None]
    assert [model_format.runtime.format for model_format in runnable] == [model_format.name for model_format in runnable]
    assert EnsembleInference.format == PYTORCH.name
    names = [model_format.name for model_format in FORMATS]
    suffixes = [model_format.suffix for model_format in runnable]
    assert len(set(names)) == len(names) and len(set(suffixes)) == len(suffixes)
    assert all(format_named(name).name == name for name in names)


def test_the_clis_read_their_choices_from_the_table(capsys):
    include = {field.name: field for field in dataclasses.fields(export.ExportRunSettings)}["include"]
    assert include.metadata["choices"] == exported_names() == ("torchscript", "onnx", "om", "openvino", "triton")
    # yolov5's benchmarks.py rows (PyTorch, TorchScript, ONNX, OpenVINO), then ours; triton runs in its own server.
    assert benchmarks.FORMATS == benchmarked_names() == ("pytorch", "torchscript", "onnx", "openvino", "om")
    with pytest.raises(SystemExit):
        export.parse_args(["--include", "tflite"])
    assert "'torchscript', 'onnx', 'om', 'openvino', 'triton'" in capsys.readouterr().err


@pytest.mark.parametrize("path, name", [("m.onnx", "onnx"), ("runs/M.ONNX", "onnx"), ("m.om", "om"),
                                        ("m.torchscript", "torchscript"), ("m_openvino_model/m.xml", "openvino"),
                                        ("m.pt", "pytorch"), ("yolov5n", "pytorch"), ("m.om.json", "pytorch")])
def test_a_files_format_is_its_suffixes(path, name):
    assert format_of(path).name == name


def test_a_folder_is_openvino_by_its_ending_and_never_triton(tmp_path):
    (tmp_path / "m_openvino_model").mkdir()
    (tmp_path / "plain").mkdir()
    assert format_of(tmp_path / "m_openvino_model").name == "openvino"
    assert format_of(tmp_path / "absent_openvino_model") is PYTORCH  # a folder's ending counts where one is
    assert format_of(tmp_path / "plain") is PYTORCH
    assert format_of(tmp_path / "model_repository" / "m" / "1" / "model.onnx").name == "onnx"  # triton's file
