"""`python -m detect.val`: COCO mAP of a checkpoint (ours or ultralytics/yolov5) on a dataset split."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from detect import backend as backends
from detect import cli
from detect.data import load_data_config
from detect.data.loader import build_val_loader
from detect.errors import UserError
from detect.evaluation.evaluator import BACKENDS
from detect.evaluation.loop import EvalResult, EvalSettings, build_evaluator, evaluate
from detect.evaluation.outputs import ValOutputs
from detect.evaluation.report import coco_stats, metrics_table, problems_list
from detect.inference.model import load_inference_model, square_input_size
from detect.run_dir import make_run_dir

LOGGER = logging.getLogger("detect.val")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = cli.ArgumentParser(prog="python -m detect.val", description=__doc__)
    parser.add_argument("--weights", required=True,
                        help="checkpoint: ours (.pt), an ultralytics/yolov5 .pt, or an exported .onnx (onnxruntime)")
    parser.add_argument("--data", default="shapes.yaml", help="data yaml: a bare name in configs/data/ or a path")
    parser.add_argument("--task", default="val", choices=("train", "val", "test"), help="which split")
    parser.add_argument("--imgsz", type=cli.positive_int, default=640, help="inference size (long side), pixels")
    parser.add_argument("--batch-size", type=cli.positive_int, default=32)
    parser.add_argument("--conf-thres", type=cli.unit_float, default=0.001, help="confidence threshold")
    parser.add_argument("--iou-thres", type=cli.unit_float, default=0.6, help="NMS IoU threshold")
    parser.add_argument("--max-det", type=cli.positive_int, default=300, help="maximum detections per image")
    parser.add_argument("--device", default="auto", help=backends.SPEC_HELP)
    parser.add_argument("--workers", type=cli.non_negative_int, default=None,
                        help="data loader workers (default: by CPU count)")
    parser.add_argument("--half", action="store_true", help="fp16 inference (accelerators only)")
    parser.add_argument("--save-json", action="store_true",
                        help="write predictions.json (COCO results) to the run folder, and ground_truth.json "
                             "when the labels are YOLO txt files (README, Evaluation)")
    parser.add_argument("--save-txt", action="store_true", help="write one YOLO txt of detections per image")
    parser.add_argument("--save-conf", action="store_true", help="with --save-txt: append the score")
    parser.add_argument("--verbose", action="store_true", help="per-class table and the 12 COCO stats")
    parser.add_argument("--plots", action="store_true", help="PR curve and confusion matrix PNGs")
    parser.add_argument("--evaluator", default="auto", choices=BACKENDS,
                        help="COCO evaluation library: auto is faster-coco-eval when installed (the same numbers, "
                             "3.3x faster at 5,000 images), else pycocotools")
    parser.add_argument("--project", default="runs/val", help="runs go to project/name")
    parser.add_argument("--name", default="exp")
    parser.add_argument("--exist-ok", action="store_true", help="reuse project/name instead of a new one")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def run(args: argparse.Namespace | None = None, **options: Any) -> EvalResult:
    """Score a checkpoint: `run(parse_args(argv))`, or the Python API `run(weights="best.pt", data="coco128.yaml")`
    with the CLI's flags as keyword arguments (a bad one raises UserError with the CLI's one-line message)."""
    if args is None:
        args = cli.parse_options(parse_args, options)
    backend = backends.select(args.device, amp=False)
    if args.half and backend.device.type == "cpu":
        raise UserError("--half needs an accelerator; on the CPU evaluate in fp32")
    backend.set_device()
    # weights are evaluated fused, in fp32 (YOLOV5-FACTS.md); an exported .onnx runs in onnxruntime
    model = load_inference_model(args.weights, backend, args.half)
    data = load_data_config(args.data)
    loader = build_val_loader(data, args.task, square_input_size(model, args.imgsz), args.batch_size, args.workers,
                              stride=model.stride, rect=model.fixed_shape is None,
                              pin_memory=backend.device.type != "cpu")
    if len(data.names) != len(model.names):
        raise UserError(f"the model predicts {len(model.names)} classes but {args.data} has {len(data.names)}")
    save_dir = make_run_dir(args.project, args.name, args.exist_ok)
    outputs = ValOutputs(save_dir, loader.split, args.save_txt, args.save_conf, args.plots)
    settings = EvalSettings(args.conf_thres, args.iou_thres, args.max_det)
    evaluator = build_evaluator(loader.split, args.evaluator)
    result = evaluate(model, loader, backend, evaluator, settings, progress=not args.no_progress,
                      on_image=outputs.add)
    LOGGER.info("%d images\n%s", result.images, metrics_table(result.metrics, per_class=args.verbose))
    if args.verbose:
        LOGGER.info("pycocotools bbox stats:\n%s", coco_stats(result.metrics))
    LOGGER.info("%s; COCO evaluation by %s", result.speed, evaluator.backend)
    if result.problems:
        LOGGER.warning("%s", problems_list(result.problems))
    if args.save_json:
        LOGGER.info("COCO results json: %s", evaluator.save_json(save_dir / "predictions.json"))
        if evaluator.json_file is None:  # ground truth built from txt labels: write it, so both files rescore
            LOGGER.info("its ground truth: %s", evaluator.save_ground_truth(save_dir / "ground_truth.json"))
    outputs.finish(result.metrics)
    LOGGER.info("results saved to %s", save_dir)
    return result


main = cli.main_for(parse_args, run)


if __name__ == "__main__":
    cli.exit_process(main())
