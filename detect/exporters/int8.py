"""INT8 ONNX: ONNX Runtime's static quantization (QDQ, per-channel weights) calibrated on train images, the stem and
the Detect head kept in float. Also the calibration images and float layers that AMCT (amct.py) uses for an .om."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from detect.atomic_file import replacing
from detect.data.data_config import load_data_config
from detect.data.datasets import to_network_layout
from detect.data.images.letterbox import letterbox
from detect.data.images.load import read_image, resize_to_imgsz
from detect.data.labels.split import load_split
from detect.errors import UserError
from detect.exporters.onnx_export import INPUT_NAME, import_onnx
from detect.exporters.torchscript import ExportSettings

LOGGER = logging.getLogger(__name__)

# Measured on yolov5n, coco128, 640 (docs/deploy.md, "INT8"): calibrating on more images did not raise the mAP.
DEFAULT_CALIB_IMAGES = 32
# Images whose activations ONNX Runtime's calibrator holds at once: it keeps every intermediate tensor until it
# computes the ranges, 228 MB an image for yolov5n at 640 (the float tensors of its shape-inferred graph).
CALIB_CHUNK_IMAGES = 8
# Kept in float besides the head: the first two convolutions (the image's full-resolution stem) and those feeding the
# head. Measured on yolov5n, coco128, 640, 32 images (docs/deploy.md, "INT8"): the head alone in float lost 0.012-0.015
# mAP@0.5:0.95, with the stem too 0.004, with stem and feeders 0.000, at the same speed (1.56x fp32 on one thread).
STEM_CONVS = 2


def _quantization():
    """onnxruntime.quantization, or one line naming what to install."""
    try:
        from onnxruntime import quantization
    except ImportError as error:
        raise UserError(f'--int8 needs onnxruntime (its quantization tools): pip install "detect-trainer[export]" '
                        f"({error})") from None
    return quantization


def calibration_images(data: str, count: int) -> list[Path]:
    """The first `count` usable images of the train split of data yaml `data` (all of them when it has fewer)."""
    return [record.path for record in load_split(load_data_config(data), "train").records[:count]]


def calibration_batches(paths: list[Path], settings: ExportSettings) -> Iterator[np.ndarray]:
    """(B, 3, h, w) float32 RGB batches in [0, 1] of `paths`, prepared as val prepares an image for a static export:
    long side resized to the input's, letterboxed to the export's shape. B is the export's batch size (1 for a
    dynamic export); a last partial batch is dropped, so every batch has the input's shape."""
    batch = 1 if settings.dynamic else settings.batch_size
    shape = settings.imgsz
    for start in range(0, len(paths) - batch + 1, batch):
        images = []
        for path in paths[start:start + batch]:
            image = resize_to_imgsz(read_image(path), max(shape), augment=False)
            images.append(to_network_layout(letterbox(image, shape)[0]))
        yield np.stack(images).astype(np.float32) / 255


def calibration_set(data: str, calib_images: int, settings: ExportSettings) -> list[np.ndarray]:
    """The calibration batches of `calib_images` train images of `data`; a UserError when not one batch fills."""
    batches = list(calibration_batches(calibration_images(data, calib_images), settings))
    if not batches:
        raise UserError(f"--int8: {data}'s train split has fewer usable images than one batch of "
                        f"{settings.batch_size}: calibrate with a smaller --batch-size")
    return batches


def _walk(start: list, step, conv_reached: str | None = None) -> dict[str, None]:
    """Names of the nodes reached from `start` by `step` (node -> next nodes), in order. A Conv reached (not one of
    `start`) ends that path: it is left out with conv_reached="skip", kept with "keep"; None walks on."""
    seen: dict[str, None] = {}
    pending = list(start)
    while pending:
        node = pending.pop()
        if node.name in seen:
            continue
        if conv_reached and node.op_type == "Conv" and node not in start:
            if conv_reached == "keep":
                seen[node.name] = None
            continue
        seen[node.name] = None
        pending += step(node)
    return seen


def _users(model):
    """node -> the nodes that read one of its outputs."""
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    return lambda node: [user for output in node.output for user in consumers.get(output, [])]


def head_nodes(model) -> tuple[list[str], list[str]]:
    """Names of the Detect head's output convolutions (the Convs whose output is reshaped into anchors) and of
    every node from them to the graph's output (the convolutions, the decode, NMS when the graph has it)."""
    return _head(model, _users(model))


def _head(model, users) -> tuple[list[str], list[str]]:
    convs = [node for node in model.graph.node
             if node.op_type == "Conv" and any(user.op_type == "Reshape" for user in users(node))]
    return [node.name for node in convs], list(_walk(convs, users))


def float_nodes(model) -> tuple[list[str], list[str]]:
    """The convolutions and all nodes that stay float: the first STEM_CONVS convolutions and their activations, the
    convolutions (with activations) whose output the Detect head reads, and the head (head_nodes)."""
    producers = {output: node for node in model.graph.node for output in node.output}
    users = _users(model)
    head_convs, head = _head(model, users)
    head = set(head)
    by_name = {node.name: node for node in model.graph.node}
    stem = [node for node in model.graph.node if node.op_type == "Conv"][:STEM_CONVS]
    # forward from each stem conv to the next Conv (its SiLU), back from each head conv to the Conv that feeds it
    kept = _walk(stem, users, "skip")
    feeders = [producers[by_name[name].input[0]] for name in head_convs]
    kept.update(_walk(feeders, lambda node: [producers[name] for name in node.input if name in producers], "keep"))
    names = [node.name for node in model.graph.node if node.name in kept or node.name in head]  # graph order
    return [name for name in names if by_name[name].op_type == "Conv"], names


def _strided_reader(batches: list[np.ndarray]):
    """An onnxruntime CalibrationDataReader over `batches` that also serves ranges of them (CalibStridedMinMax)."""
    quantization = _quantization()

    class Reader(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.set_range(0, len(batches))

        def __len__(self) -> int:
            return len(batches)

        def set_range(self, start_index: int, end_index: int) -> None:
            self.pending = iter(batches[start_index:end_index])

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self.pending, None)
            return None if batch is None else {INPUT_NAME: batch}

    return Reader()


def quantize_onnx(onnx_path: Path, data: str, calib_images: int, settings: ExportSettings) -> Path:
    """Write <stem>-int8.onnx beside `onnx_path`: QDQ, int8 per-channel weights, uint8 activations calibrated on
    `calib_images` train images of `data`, float_nodes left in float; the fp32 file's metadata plus "int8": true."""
    quantization = _quantization()
    onnx = import_onnx()
    batches = calibration_set(data, calib_images, settings)
    model = onnx.load(str(onnx_path))
    _, kept = float_nodes(model)
    output = onnx_path.with_name(f"{onnx_path.stem}-int8.onnx")
    LOGGER.info("int8: calibrating on %d images of %s", sum(len(batch) for batch in batches), data)
    # The calibrator holds every activation of the batches it is given; feed it chunks (any method honours the
    # option despite its name), whose count must divide the batches'.
    most = max(1, CALIB_CHUNK_IMAGES // len(batches[0]))
    chunk = max(size for size in range(1, most + 1) if len(batches) % size == 0)
    with replacing(output, keep_suffix=True) as temporary:
        quantization.quantize_static(
            model, temporary, _strided_reader(batches), quant_format=quantization.QuantFormat.QDQ, per_channel=True,
            activation_type=quantization.QuantType.QUInt8, weight_type=quantization.QuantType.QInt8,
            # min-max: percentile and entropy calibration were no better on yolov5n, 5-12x slower (docs/deploy.md)
            nodes_to_exclude=kept, calibrate_method=quantization.CalibrationMethod.MinMax,
            extra_options={"CalibStridedMinMax": chunk})
        quantized = onnx.load(str(temporary))
        carry_int8_metadata(model, quantized)
        onnx.save(quantized, str(temporary))
    return output


def carry_int8_metadata(source, quantized) -> None:
    """Give the quantized ONNX model `quantized` the metadata_props of its fp32 `source`, plus "int8": true."""
    del quantized.metadata_props[:]
    quantized.metadata_props.extend(source.metadata_props)
    quantized.metadata_props.add(key="int8", value=json.dumps(True))
