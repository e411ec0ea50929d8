"""ONNX export with the TorchScript-based exporter, checked by onnx.checker, optionally simplified by onnxruntime."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import torch

from detect.atomic_file import Draft, replacing
from detect.errors import UserError
from detect.exporters.graph_nms import append_nms, check_candidates
from detect.exporters.torchscript import ExportSettings
from detect.models import PredictModule

INPUT_NAME, OUTPUT_NAME = "images", "output0"  # yolov5's names, so tools written for its exports read ours


def import_onnx():
    """The onnx package, or one line saying what to install."""
    try:
        import onnx
    except ImportError as error:
        raise UserError(f'ONNX export needs onnx and onnxruntime: pip install "detect-trainer[export]" ({error})') from None
    return onnx


def export_onnx(module: PredictModule, example: torch.Tensor, metadata: dict, settings: ExportSettings,
                path: Path) -> Path:
    """Export `module` to `path` (written whole, by the one writer: atomic_file), as _write_onnx says."""
    with replacing(path) as temporary:
        _write_onnx(module, example, metadata, settings, temporary)
    return path


def _write_onnx(module: PredictModule, example: torch.Tensor, metadata: dict, settings: ExportSettings,
                temporary: Path) -> None:
    """Export `module` to `temporary`, simplify it when asked, append the NMS of `settings.nms`, store `metadata`
    (with "nms" when the graph has it) and check it.

    The exporter is torch's TorchScript-based one (dynamo=False), on purpose: it writes the requested opset
    natively (ATC reads 11 to 15, the dynamo exporter writes 18 and converts down), and it needs no onnxscript.
    """
    onnx = import_onnx()
    dynamic_axes = None
    if settings.dynamic:
        dynamic_axes = {INPUT_NAME: {0: "batch", 2: "height", 3: "width"}, OUTPUT_NAME: {0: "batch", 1: "anchors"}}
    elif settings.dynamic_batch:
        dynamic_axes = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}}
    with torch.no_grad(), warnings.catch_warnings():
        # The legacy exporter warns that it is legacy on every call (torch >= 2.9); it is the one chosen, see above.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(module, (example,), str(temporary), dynamo=False, opset_version=settings.opset,
                          input_names=[INPUT_NAME], output_names=[OUTPUT_NAME], dynamic_axes=dynamic_axes,
                          do_constant_folding=True)
    if settings.simplify:
        simplify_onnx(temporary)
    model = onnx.load(str(temporary))
    if settings.dynamic_batch and not settings.dynamic:
        # The exporter leaves the output's anchors and columns symbolic once the batch is; they are fixed by the
        # input shape, and a Triton config (or any reader) wants them as numbers.
        with torch.no_grad():
            _fix_dims(model.graph.output[0], module(example).shape[1:])
    if settings.nms is not None:
        candidates, num_classes = module(example).shape[1], len(metadata["names"])
        check_candidates(candidates, num_classes, settings.nms)
        model = append_nms(model, settings.nms, settings.opset)
        metadata = {**metadata, "nms": dataclasses.asdict(settings.nms)}
    for key, value in metadata.items():
        model.metadata_props.add(key=key, value=json.dumps(value))
    onnx.checker.check_model(model)
    onnx.save(model, str(temporary))


def _fix_dims(value, sizes: torch.Size) -> None:
    """Give a graph value's dimensions after the batch the fixed `sizes`."""
    for dim, size in zip(value.type.tensor_type.shape.dim[1:], sizes, strict=True):
        dim.dim_value = size


def simplify_onnx(temporary: Path) -> None:
    """Rewrite `temporary` (an ONNX being written) with onnxruntime's basic graph optimisations (constant folding,
    redundant-node removal): standard ONNX operators only, so ATC and any runtime still read it, and no extra package
    is needed."""
    import onnxruntime

    onnx = import_onnx()
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    scratch = Draft(temporary.with_suffix(".simplified.onnx"))  # onnxruntime writes it, we read it, it goes
    try:
        options.optimized_model_filepath = str(scratch.temporary)
        onnxruntime.InferenceSession(str(temporary), options, providers=["CPUExecutionProvider"])
        model = onnx.load(str(scratch.temporary))
    finally:
        scratch.discard()
    # onnxruntime declares all of its operator domains; keep only those the graph uses (ATC knows the default one).
    used = {node.domain for node in model.graph.node}
    kept = [entry for entry in model.opset_import if entry.domain in used or entry.domain in ("", "ai.onnx")]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    onnx.save(model, str(temporary))
