"""`python -m detect.export`: a checkpoint as TorchScript, ONNX (decode in the graph, NMS outside), Ascend .om,
OpenVINO IR or a Triton model repository."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from detect import atomic_file, cli
from detect import backend as backends
from detect.config import IMAGE_SIZE, NON_NEGATIVE, POSITIVE, UNIT, Settings, option, options_from_dict
from detect.errors import UserError
from detect.evaluation.export_check import check_files, check_table, file_megabytes
from detect.exporters.formats import Int8Calibration, write_formats
from detect.exporters.graph_nms import NmsSettings
from detect.exporters.int8 import DEFAULT_CALIB_IMAGES
from detect.exporters.torchscript import ExportSettings
from detect.exporters.triton import BACKENDS as TRITON_BACKENDS
from detect.exporters.triton import TritonSettings
from detect.inference.model import (
    IMGSZ_DEFAULT_HELP,
    PYTORCH,
    check_imgsz_flag,
    exported_names,
    format_named,
    input_size,
)
from detect.models import build_model
from detect.models.weights import YOLOV5_DEFAULT_WEIGHTS, load_model, resolve_weights
from detect.run_dir import check_folder

LOGGER = logging.getLogger("detect.export")
FORMATS = exported_names()
GRAPH_NMS = [name for name in FORMATS if format_named(name).graph_nms]  # where --nms can put NMS


@dataclasses.dataclass(frozen=True)
class ExportRunSettings(Settings):
    """The options of `python -m detect.export` and `detect.export.run`, with yolov5's export.py names and defaults
    (the export's own defaults are ExportSettings')."""

    weights: str = option(YOLOV5_DEFAULT_WEIGHTS, "checkpoint: ours (.pt) or an ultralytics/yolov5 .pt (a bare name: "
                                                  "the working folder, then ./weights/; never downloaded)")
    cfg: str | None = option(None, "instead of --weights: a model yaml (ours or yolov5's format), exported with its "
                                   "initial weights, e.g. to check that a new architecture converts; --nc classes")
    nc: int | None = option(None, "classes of a --cfg model (default: the yaml's nc)", bound=POSITIVE)
    include: tuple[str, ...] = option(("torchscript",), "formats to write (om converts the ONNX with CANN's atc, "
                                                        "openvino with openvino.convert_model; triton writes "
                                                        "model_repository/<name>/ with a dynamic-batch model and "
                                                        "its config.pbtxt)", choices=FORMATS)
    imgsz: tuple[int, ...] | None = option(None, "input size: one side, or height width (multiples of the stride); "
                                           + IMGSZ_DEFAULT_HELP, bound=IMAGE_SIZE)
    batch_size: int = option(ExportSettings.batch_size, "batch size of a static export", bound=POSITIVE)
    device: str = option("cpu", backends.SPEC_HELP)
    half: bool = option(ExportSettings.half, "fp16 weights and input")
    dynamic: bool = option(ExportSettings.dynamic, "ONNX/TorchScript: dynamic batch, height and width")
    opset: int = option(ExportSettings.opset, "ONNX opset (ATC: 11 to 15)", bound=POSITIVE)
    simplify: bool = option(ExportSettings.simplify, "ONNX: fold constants (onnxruntime's basic passes)")
    fuse: bool | None = option(None, "fold BatchNorm into the convolutions (default: on)")
    nms: bool = option(False, "ONNX-based formats: NMS inside the graph, outputs detections (B, max-det, 6) and "
                              "count (B,)")
    conf_thres: float = option(NmsSettings.conf_threshold, "--nms: confidence threshold", bound=UNIT)
    iou_thres: float = option(NmsSettings.iou_threshold, "--nms: IoU threshold", bound=UNIT)
    max_det: int = option(NmsSettings.max_det, "--nms: detections kept per image", bound=POSITIVE)
    agnostic_nms: bool = option(NmsSettings.agnostic, "--nms: one NMS across classes, each box's best class")
    check: bool = option(False, "score the .pt and every written file on --data's val split (square inputs at "
                                "--imgsz, --batch-size) and print one table")
    data: str | None = option(None, "data yaml (a bare name in configs/data/ or a path) that --check scores on "
                                    "and --int8 calibrates on (its train split)")
    int8: bool = option(False, "also int8 files, each runtime's fastest recipe: with onnx <stem>-int8.onnx (ONNX "
                               "Runtime static quantization, the Detect head in float), with openvino "
                               "<stem>-int8_openvino_model (NNCF); with om, AMCT calibrates the ONNX before atc")
    calib_images: int = option(DEFAULT_CALIB_IMAGES, "--int8: train images of --data to calibrate on",
                               bound=POSITIVE)
    soc_version: str | None = option(None, "om: the Ascend chip the .om runs on, e.g. Ascend910B2, Ascend310P3 "
                                           "(default: read from this machine's NPU, --device's or the first)")
    output_dir: str | None = option(None, "where to write (default: beside --weights; with --cfg the working "
                                          "folder)")
    triton_backend: str = option(TritonSettings.backend, "triton: the backend that runs the model (its ONNX, or "
                                                         "OpenVINO IR converted from it)", choices=TRITON_BACKENDS)
    triton_max_batch: int = option(TritonSettings.max_batch_size, "triton: max_batch_size, the largest batch its "
                                                                  "dynamic batcher forms", bound=POSITIVE)
    triton_max_queue_delay_us: int = option(TritonSettings.max_queue_delay_us, "triton: how long a request may "
                                            "wait for others to batch with (microseconds)", bound=NON_NEGATIVE)
    triton_instances: int = option(TritonSettings.instances, "triton: model instances run side by side",
                                   bound=POSITIVE)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.output_dir is not None:
            check_folder(self.output_dir, "--output-dir")
        check_imgsz_flag(self.imgsz)
        if self.check and (self.cfg or not self.data):
            raise UserError("--check scores --weights on --data's val split: give --weights (not --cfg) and --data")
        if self.nms and self.opset < 11:
            raise UserError(f"--nms needs --opset 11 or later (NonMaxSuppression, ScatterND), got {self.opset}")
        if self.nms and not set(GRAPH_NMS) & set(self.include):
            raise UserError(f"--nms puts NMS in ONNX-based graphs: add --include {', '.join(GRAPH_NMS[:-1])} or "
                            f"{GRAPH_NMS[-1]}")
        if self.int8:
            self._check_int8()
        if "om" in self.include and self.dynamic:
            raise UserError("--include om needs static shapes (ATC compiles one input shape): drop --dynamic")

    def _check_int8(self) -> None:
        if not any(format_named(name).int8 for name in self.include):
            raise UserError("--int8 quantizes the ONNX, the OpenVINO IR and the .om (through AMCT): add --include "
                            "onnx, openvino or om")
        if not self.data:
            raise UserError("--int8 calibrates on the train split of --data: give --data (a data yaml)")
        if self.half:
            raise UserError("--int8 and --half: choose one (int8 quantizes the fp32 export)")
        if "onnx" in self.include and self.opset < 13:
            raise UserError(f"--int8 needs --opset 13 or later (per-channel QuantizeLinear's axis), got {self.opset}")

    def export_settings(self, imgsz: tuple[int, int]) -> ExportSettings:
        """What the exporters need of these options, at `imgsz` (--imgsz, else the model's: input_size)."""
        return ExportSettings(imgsz=imgsz, batch_size=self.batch_size,
                              dynamic=self.dynamic, half=self.half, fuse=self.fuse is not False, opset=self.opset,
                              simplify=self.simplify, nms=self._nms())

    def triton_settings(self) -> TritonSettings:
        return TritonSettings(self.triton_backend, self.triton_max_batch, self.triton_max_queue_delay_us,
                              self.triton_instances)

    def _nms(self) -> NmsSettings | None:
        if not self.nms:
            return None
        return NmsSettings(self.conf_thres, self.iou_thres, self.max_det, self.agnostic_nms)


parse_args = cli.settings_reader(ExportRunSettings, "python -m detect.export", __doc__,
                                 no_ops=("--inplace", "--workspace", "--verbose"))


def run(**options: Any) -> dict[str, Path]:
    """Export from Python with the CLI's flags as keyword arguments; returns format -> path."""
    return export(options_from_dict(ExportRunSettings, options, "detect.export.run"))


def om_chip(args: ExportRunSettings) -> str | None:
    """The chip an .om is compiled for: --soc-version, else the one this machine's NPU reports (an .om runs on the chip
    it was made for only, and an Atlas 800T A2 may hold 910B2 or 910B3 cards); None when no om is asked for."""
    if "om" not in args.include:
        return None
    if args.soc_version:
        return args.soc_version
    chip = backends.ascend_chip(args.device)
    if chip is None:
        raise UserError("--include om: no --soc-version, and no NPU here to read the chip from; give --soc-version, "
                        "the chip the .om will run on (npu-smi info's Name with Ascend before it, e.g. Ascend910B2)")
    LOGGER.info("om: for %s (this machine's NPU; --soc-version for another chip)", chip)
    return chip


@atomic_file.command()  # what it reads is its sources until it ends
def export(args: ExportRunSettings) -> dict[str, Path]:
    """Write each format asked for; returns format -> path (om is absent when atc is not installed). The CLI's body."""
    weights = Path(args.cfg) if args.cfg else resolve_weights(args.weights)
    model = build_model(args.cfg, num_classes=args.nc).eval() if args.cfg else load_model(weights)  # refused: no folder
    size = input_size(model, args.imgsz)
    LOGGER.info("exporting %s at %s", weights, size)
    settings = args.export_settings(size.size)
    output_dir = Path(args.output_dir) if args.output_dir else Path() if args.cfg else weights.parent
    atomic_file.output_folder(output_dir, "--output-dir")
    if not os.access(output_dir, os.W_OK):
        raise UserError(f"cannot write to {output_dir}: choose another folder with --output-dir")
    backend = backends.select(args.device, amp=False)
    backend.set_device()
    int8 = Int8Calibration(args.data, args.calib_images) if args.int8 else None
    written = write_formats(model, args.include, settings, output_dir / weights.stem, backend.device, int8,
                            om_chip(args), args.triton_settings())
    for kind, path in written.items():
        LOGGER.info("%s: %s (%.1f MB)", kind, path, file_megabytes(path))
    if args.check:
        rows = check_files({PYTORCH.name: weights, **written}, args.data, settings.imgsz[0], settings.batch_size, backend)
        LOGGER.info("--check on %s (val split, %d px, batch %d):\n%s", args.data, settings.imgsz[0],
                    settings.batch_size, check_table(rows))
    elif "onnx" in written:
        data = args.data or model.trained.data or "<data.yaml>"
        LOGGER.info("check it: python -m detect.val --weights %s --data %s --imgsz %d%s", written["onnx"], data,
                    size.side, "" if settings.dynamic else f" --batch-size {settings.batch_size}")
    return written


main = cli.main_for(parse_args, export)


if __name__ == "__main__":
    cli.exit_process(main())
