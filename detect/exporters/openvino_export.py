"""OpenVINO IR (.xml + .bin) converted from our ONNX export, its metadata carried in the IR's rt_info."""

from __future__ import annotations

from pathlib import Path

from detect.atomic_file import replacing
from detect.backend.openvino_runtime import FOLDER_SUFFIX, RT_INFO_SECTION, import_openvino
from detect.exporters.torchscript import ExportSettings


def openvino_folder(onnx_path: Path) -> Path:
    """Where the IR of `onnx_path` goes: <stem>_openvino_model/ beside it."""
    return onnx_path.with_name(f"{onnx_path.stem}{FOLDER_SUFFIX}")


def export_openvino(onnx_path: Path, settings: ExportSettings, path: Path | None = None) -> Path:
    """Convert our ONNX export at `onnx_path` with openvino.convert_model and save it as `path` (default
    <stem>_openvino_model/<stem>.xml) and its .bin, fp16 weights with `settings.half`; returns the .xml path.

    The ONNX's metadata_props (names, stride, imgsz, batch, dynamic, half, and "nms" when the graph has it) are
    copied into rt_info["detect"], so the .xml describes itself in a section of ours rather than wherever a given
    OpenVINO's ONNX reader puts them (2026.4: rt_info["framework"]).
    """
    openvino = import_openvino("--include openvino")
    import onnx  # present: the ONNX was just written with it

    metadata = {prop.key: prop.value for prop in onnx.load(str(onnx_path), load_external_data=False).metadata_props}
    model = openvino.convert_model(str(onnx_path))
    for key, text in metadata.items():
        model.set_rt_info(text, [RT_INFO_SECTION, key])
    path = path or openvino_folder(onnx_path) / f"{onnx_path.stem}.xml"
    # save_model compresses weights to fp16 unless told otherwise: keep an fp32 export fp32.
    with replacing(path, keep_suffix=True, companions=(".bin",)) as temporary:  # the .xml and its .bin
        openvino.save_model(model, str(temporary), compress_to_fp16=settings.half)
    return path
