"""INT8 OpenVINO IR: NNCF's post-training quantization of the fp32 IR, calibrated on the same train images as the
INT8 ONNX (int8.calibration_set)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

from detect.atomic_file import replacing
from detect.backend.openvino_runtime import RT_INFO_SECTION, import_nncf, import_openvino, shared_core
from detect.exporters.int8 import calibration_set
from detect.exporters.openvino_export import openvino_folder
from detect.exporters.torchscript import ExportSettings

LOGGER = logging.getLogger(__name__)

PURPOSE = "--int8 with --include openvino"


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
    """NNCF draws its progress bars on rich's global console: quiet for the call (our log line says what runs)."""
    import rich  # nncf's dependency

    console = rich.get_console()
    quiet, console.quiet = console.quiet, True
    try:
        yield
    finally:
        console.quiet = quiet


def quantize_openvino(xml_path: Path, data: str, calib_images: int, settings: ExportSettings) -> Path:
    """Write <stem>-int8_openvino_model/<stem>-int8.xml beside the fp32 IR's folder: NNCF's default post-training
    quantization (int8 weights per channel, activations calibrated on `calib_images` train images of `data`, fast bias
    correction), every layer quantized; the fp32 IR's rt_info plus "int8": true.

    Unlike the ONNX recipe, nothing is kept in float: on yolov5n, coco128, 640, batch 1 (docs/benchmarks.md, "INT8")
    keeping the ONNX recipe's float layers (int8.float_nodes) scored 0.365 against fp32's 0.359 at 111 ms an image,
    quantizing all of them 0.357 at 78 ms (fp32 178 ms, a loaded machine)."""
    openvino, nncf = import_openvino(PURPOSE), import_nncf(PURPOSE)
    batches = calibration_set(data, calib_images, settings)
    model = shared_core(PURPOSE).read_model(str(xml_path))
    LOGGER.info("int8 (OpenVINO, NNCF): calibrating on %d images of %s", sum(len(batch) for batch in batches), data)
    nncf.set_log_level(logging.WARNING)  # not a line per layer
    with _quiet_progress():
        quantized = nncf.quantize(model, nncf.Dataset(batches), subset_size=len(batches))
    quantized.set_rt_info(json.dumps(True), [RT_INFO_SECTION, "int8"])
    stem = f"{xml_path.stem}-int8"
    path = openvino_folder(xml_path.parent.with_name(f"{stem}.onnx")) / f"{stem}.xml"
    with replacing(path, keep_suffix=True, companions=(".bin",)) as temporary:  # the .xml and its .bin
        openvino.save_model(quantized, str(temporary), compress_to_fp16=False)
    return path
