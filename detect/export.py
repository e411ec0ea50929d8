"""`python -m detect.export`: a checkpoint as TorchScript, ONNX (decode in the graph, NMS outside) or Ascend .om."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from detect import backend as backends
from detect import cli
from detect.errors import UserError
from detect.exporters.om import convert_om
from detect.exporters.onnx_export import export_onnx
from detect.exporters.torchscript import (
    DEFAULT_OPSET,
    ExportSettings,
    export_metadata,
    export_torchscript,
    traced_module,
)
from detect.models.weights import load_model, resolve_weights

LOGGER = logging.getLogger("detect.export")
FORMATS = ("torchscript", "onnx", "om")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = cli.ArgumentParser(prog="python -m detect.export", description=__doc__)
    parser.add_argument("--weights", required=True, help="checkpoint: ours (.pt) or an ultralytics/yolov5 .pt")
    parser.add_argument("--include", nargs="+", default=["torchscript"], choices=FORMATS,
                        help="formats to write (om converts the ONNX with CANN's atc)")
    parser.add_argument("--imgsz", type=cli.positive_int, nargs="+", default=[640, 640],
                        help="input size: one side, or height width (multiples of the stride)")
    parser.add_argument("--batch-size", type=cli.positive_int, default=1, help="batch size of a static export")
    parser.add_argument("--device", default="cpu", help=backends.SPEC_HELP)
    parser.add_argument("--half", action="store_true", help="fp16 weights and input")
    parser.add_argument("--dynamic", action="store_true", help="ONNX/TorchScript: dynamic batch, height and width")
    parser.add_argument("--opset", type=cli.positive_int, default=DEFAULT_OPSET, help="ONNX opset (ATC: 11 to 15)")
    parser.add_argument("--simplify", action="store_true", help="ONNX: fold constants (onnxruntime's basic passes)")
    parser.add_argument("--fuse", action=argparse.BooleanOptionalAction, default=True,
                        help="fold BatchNorm into the convolutions (default: on)")
    parser.add_argument("--soc-version", default=None, help="om: the Ascend chip, e.g. Ascend910B3, Ascend310P3")
    parser.add_argument("--output-dir", type=Path, default=None, help="where to write (default: beside --weights)")
    args = parser.parse_args(argv)
    if len(args.imgsz) > 2:
        parser.error(f"argument --imgsz: one side or height width, got {len(args.imgsz)} numbers")
    if "om" in args.include and not args.soc_version:
        parser.error("--include om needs --soc-version (the chip, e.g. Ascend910B3 or Ascend310P3)")
    if "om" in args.include and args.dynamic:
        parser.error("--include om needs static shapes (ATC compiles one input shape): drop --dynamic")
    return args


def run(args: argparse.Namespace) -> dict[str, Path]:
    """Write each format asked for; returns format -> path (om is absent when atc is not installed)."""
    settings = ExportSettings(imgsz=(args.imgsz[0], args.imgsz[-1]), batch_size=args.batch_size,
                              dynamic=args.dynamic, half=args.half, fuse=args.fuse, opset=args.opset,
                              simplify=args.simplify)
    weights = resolve_weights(args.weights)
    output_dir = args.output_dir or weights.parent
    output_dir.mkdir(parents=True, exist_ok=True)
    if not os.access(output_dir, os.W_OK):
        raise UserError(f"cannot write to {output_dir}: choose another folder with --output-dir")
    backend = backends.select(args.device, amp=False)
    backend.set_device()
    model = load_model(weights)
    metadata = export_metadata(model, settings)
    module, example = traced_module(model, settings, backend.device)
    stem = output_dir / weights.stem
    written: dict[str, Path] = {}
    if "torchscript" in args.include:
        written["torchscript"] = export_torchscript(module, example, metadata, stem.with_suffix(".torchscript"))
    if "onnx" in args.include or "om" in args.include:
        written["onnx"] = export_onnx(module, example, metadata, settings, stem.with_suffix(".onnx"))
    if "om" in args.include:
        om_path = convert_om(written["onnx"], args.soc_version, settings)
        if om_path is not None:
            written["om"] = om_path
    for kind, path in written.items():
        LOGGER.info("%s: %s (%.1f MB)", kind, path, path.stat().st_size / 1e6)
    if "onnx" in written:
        LOGGER.info("check it: python -m detect.val --weights %s --data <data.yaml>%s", written["onnx"],
                    "" if settings.dynamic else f" --batch-size {settings.batch_size}")
    return written


main = cli.main_for(parse_args, run)


if __name__ == "__main__":
    cli.exit_process(main())
