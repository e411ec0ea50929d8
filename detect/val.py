"""`python -m detect.val`: COCO mAP of a checkpoint (ours or ultralytics/yolov5) on a dataset split."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from detect import backend as backends
from detect import cli
from detect.config import NON_NEGATIVE, POSITIVE, UNIT, check_options, option, options_from_dict
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


@dataclasses.dataclass(frozen=True)
class ValSettings:
    """The options of `python -m detect.val` and `detect.val.run`, with yolov5's names and defaults."""

    weights: str = option(description="checkpoint: ours (.pt), an ultralytics/yolov5 .pt, or an exported .onnx "
                                      "(onnxruntime)")
    data: str = option("shapes.yaml", "data yaml: a bare name in configs/data/ or a path")
    task: str = option("val", "which split", choices=("train", "val", "test"))
    imgsz: int = option(640, "inference size (long side), pixels", bound=POSITIVE)
    batch_size: int = option(32, bound=POSITIVE)
    conf_thres: float = option(EvalSettings.conf_threshold, "confidence threshold", bound=UNIT)
    iou_thres: float = option(EvalSettings.iou_threshold, "NMS IoU threshold", bound=UNIT)
    max_det: int = option(EvalSettings.max_det, "maximum detections per image", bound=POSITIVE)
    device: str = option("auto", backends.SPEC_HELP)
    workers: int | None = option(None, "data loader workers (default: by CPU count)", bound=NON_NEGATIVE)
    half: bool = option(False, "fp16 inference (accelerators only)")
    save_json: bool = option(False, "write predictions.json (COCO results) to the run folder, and ground_truth.json "
                                     "when the labels are YOLO txt files (README, Evaluation)")
    save_txt: bool = option(False, "write one YOLO txt of detections per image")
    save_conf: bool = option(False, "with --save-txt: append the score")
    verbose: bool = option(False, "per-class table and the 12 COCO stats")
    plots: bool = option(False, "PR curve and confusion matrix PNGs")
    evaluator: str = option("auto", "COCO evaluation library: auto is faster-coco-eval when installed (the same "
                                    "numbers, 3.3x faster at 5,000 images), else pycocotools", choices=BACKENDS)
    project: str = option("runs/val", "runs go to project/name")
    name: str = option("exp")
    exist_ok: bool = option(False, "reuse project/name instead of a new one")
    progress: bool = option(True, "progress bar (--no-progress: none)", flags=("--no-progress",))

    def __post_init__(self) -> None:
        check_options(self)


def parse_args(argv: list[str] | None) -> ValSettings:
    parser = cli.settings_parser(ValSettings, "python -m detect.val", __doc__)
    return cli.settings_from_args(ValSettings, parser.parse_args(argv))


def run(**options: Any) -> EvalResult:
    """Score a checkpoint from Python: `run(weights="best.pt", data="coco128.yaml")`, the CLI's flags as keyword
    arguments (a bad one raises UserError naming it)."""
    return validate(options_from_dict(ValSettings, options, "detect.val.run"))


def validate(settings: ValSettings) -> EvalResult:
    """Score `settings.weights` on its data split; the CLI's body."""
    backend = backends.select(settings.device, amp=False)
    if settings.half and backend.device.type == "cpu":
        raise UserError("--half needs an accelerator; on the CPU evaluate in fp32")
    backend.set_device()
    # weights are evaluated fused, in fp32 (YOLOV5-FACTS.md); an exported .onnx runs in onnxruntime
    model = load_inference_model(settings.weights, backend, settings.half)
    data = load_data_config(settings.data)
    loader = build_val_loader(data, settings.task, square_input_size(model, settings.imgsz), settings.batch_size,
                              settings.workers, stride=model.stride, rect=model.fixed_shape is None,
                              pin_memory=backend.device.type != "cpu")
    if len(data.names) != len(model.names):
        raise UserError(f"the model predicts {len(model.names)} classes but {settings.data} has {len(data.names)}")
    save_dir = make_run_dir(settings.project, settings.name, settings.exist_ok)
    outputs = ValOutputs(save_dir, loader.split, settings.save_txt, settings.save_conf, settings.plots)
    nms = EvalSettings(settings.conf_thres, settings.iou_thres, settings.max_det)
    evaluator = build_evaluator(loader.split, settings.evaluator)
    result = evaluate(model, loader, backend, evaluator, nms, progress=settings.progress, on_image=outputs.add)
    LOGGER.info("%d images\n%s", result.images, metrics_table(result.metrics, per_class=settings.verbose))
    if settings.verbose:
        LOGGER.info("pycocotools bbox stats:\n%s", coco_stats(result.metrics))
    LOGGER.info("%s; COCO evaluation by %s", result.speed, evaluator.backend)
    if result.problems:
        LOGGER.warning("%s", problems_list(result.problems))
    if settings.save_json:
        LOGGER.info("COCO results json: %s", evaluator.save_json(save_dir / "predictions.json"))
        if evaluator.json_file is None:  # ground truth built from txt labels: write it, so both files rescore
            LOGGER.info("its ground truth: %s", evaluator.save_ground_truth(save_dir / "ground_truth.json"))
    outputs.finish(result.metrics)
    LOGGER.info("results saved to %s", save_dir)
    return result


main = cli.main_for(parse_args, validate)


if __name__ == "__main__":
    cli.exit_process(main())
