"""`python -m detect.val`: COCO mAP of checkpoints (ours or ultralytics/yolov5, several: one ensemble) on a dataset
split; --task speed times each stage, --task study sweeps image sizes."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from detect import atomic_file, cli
from detect import backend as backends
from detect.config import IMAGE_SIZE, NON_NEGATIVE, POSITIVE, UNIT, option, options_from_dict
from detect.data.data_config import SPLITS
from detect.data.images.pixels import DEFAULT_MAX_PIXELS, MAX_PIXELS, MAX_PIXELS_HELP
from detect.data.labels.check import DEFAULT_MAX_BOXES, MAX_BOXES, MAX_BOXES_HELP, ImageBounds
from detect.data.loader import Loader, ValLoaderSettings
from detect.data.storage.cache_places import CACHE_DIR_HELP
from detect.evaluation.evaluator import BACKENDS, CocoEvaluator
from detect.evaluation.report import coco_stats, metrics_table, problems_list
from detect.evaluation.scoring import ScoredSplit, prepare_scoring
from detect.evaluation.size_study import STUDY_SIZES, run_study
from detect.evaluation.val_loop import (
    SPEED_SETTINGS,
    EvalResult,
    EvalSettings,
    PassOptions,
    Predict,
    Speed,
    evaluate,
    measure_speed,
)
from detect.evaluation.val_outputs import ValOutputs
from detect.inference.model import IMGSZ_DEFAULT_HELP
from detect.inference.slicing import SlicedPredictor, SliceSettings, SlicingFlags
from detect.models.weights import YOLOV5_DEFAULT_WEIGHTS
from detect.run_dir import check_run_folder, make_run_dir

LOGGER = logging.getLogger("detect.val")


@dataclasses.dataclass(frozen=True)
class ValSettings(SlicingFlags):
    """The options of `python -m detect.val` and `detect.val.run`, with yolov5's names and defaults."""

    weights: tuple[str, ...] = option((YOLOV5_DEFAULT_WEIGHTS,), "a checkpoint: ours (.pt), an ultralytics/yolov5 .pt "
                                      "or an export (.onnx, .torchscript, .om, an OpenVINO .xml or its folder); "
                                      "several .pt: one ensemble, their predictions joined before NMS (yolov5's), "
                                      "each also scored alone (--task study: each in turn); a bare name: the working "
                                      "folder, then ./weights/ (never downloaded)")
    data: str = option("shapes.yaml", "data yaml: a bare name in configs/data/ or a path")
    task: str = option("val", "a split to score (train, val, test); speed: ms per image of each stage on the val split "
                              "at conf 0.25 and IoU 0.45, no mAP; study: mAP and speed at --study-sizes on the val "
                              "split (study_<data>_<weights>.txt and study.png)", choices=(*SPLITS, "speed", "study"))
    study_sizes: tuple[int, ...] = option(STUDY_SIZES, "image sizes of --task study (yolov5's)", bound=IMAGE_SIZE)
    augment: bool = option(False, "test-time augmentation: 3 scales, one flipped, merged before NMS (.pt only)")
    imgsz: int | None = option(None, "inference size (long side), pixels; " + IMGSZ_DEFAULT_HELP, bound=IMAGE_SIZE)
    batch_size: int = option(32, bound=POSITIVE)
    conf_thres: float = option(EvalSettings.conf_threshold, "confidence threshold", bound=UNIT)
    iou_thres: float = option(EvalSettings.iou_threshold, "NMS IoU threshold", bound=UNIT)
    max_det: int = option(EvalSettings.max_det, "maximum detections per image (--slice: per window)",
                          bound=POSITIVE)
    device: str = option("auto", backends.SPEC_HELP)
    nms_device: str = option("device", backends.NMS_DEVICE_HELP, choices=backends.NMS_DEVICES)
    workers: int | None = option(None, "data loader workers (default: by CPU count)", bound=NON_NEGATIVE)
    cache_dir: str | None = option(None, CACHE_DIR_HELP)
    max_pixels: int = option(DEFAULT_MAX_PIXELS, MAX_PIXELS_HELP, bound=MAX_PIXELS)
    max_boxes: int = option(DEFAULT_MAX_BOXES, MAX_BOXES_HELP, bound=MAX_BOXES)
    half: bool = option(False, "fp16 inference (on the CPU: fp32, with a warning)")
    save_json: bool = option(False, "write predictions.json (COCO results) to the run folder, and ground_truth.json "
                                     "when the labels are YOLO txt files (docs/usage.md, Evaluation)")
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
        super().__post_init__()
        check_run_folder(self.project, self.name)

    @property
    def nms(self) -> EvalSettings:
        """The NMS settings these flags ask for."""
        return EvalSettings(self.conf_thres, self.iou_thres, self.max_det)


parse_args = cli.settings_reader(ValSettings, "python -m detect.val", __doc__, no_ops=("--dnn",))


def run(**options: Any) -> Any:
    """Score checkpoints from Python: `run(weights="best.pt", data="coco128.yaml")`, the CLI's flags as keyword
    arguments (a bad one raises UserError naming it). Returns the task's result: an EvalResult (several weights: the
    ensemble's), a Speed, or the study's txt path (a list of them, one per file, for several weights)."""
    results = run_tasks(options_from_dict(ValSettings, options, "detect.val.run"))
    return results[0] if len(results) == 1 else results


@atomic_file.command()  # what it reads is its sources until it ends
def run_tasks(settings: ValSettings) -> list[Any]:
    """--task for the --weights (several: their ensemble; --task study scores each in turn, as yolov5's); the CLI's
    body."""
    if settings.half and backends.select(settings.device, amp=False).device.type == "cpu":
        LOGGER.warning("--half: fp16 needs an accelerator; evaluating in fp32 on the CPU (as yolov5 does)")
        settings = dataclasses.replace(settings, half=False)
    if settings.task == "study":
        save_dir = make_run_dir(settings.project, settings.name, settings.exist_ok)
        return run_study(lambda weights, imgsz: score(settings, weights, imgsz), settings.weights, settings.data,
                         save_dir, settings.study_sizes)
    if settings.task == "speed":
        return [speed(settings)]
    return [validate(settings) if len(settings.weights) == 1 else validate_ensemble(settings)]


def _prepare(settings: ValSettings, weights: str | tuple[str, ...],
             imgsz: int | None) -> tuple[backends.Backend, Predict, Loader]:
    """The backend, the model's predict and the loader of the split --task names (val for speed and study)."""
    backend = backends.select(settings.device, amp=False, nms_device=settings.nms_device)
    backend.set_device()
    split = settings.task if settings.task in SPLITS else "val"
    scored = ScoredSplit(settings.data, split, settings.cache_dir, ImageBounds(settings.max_pixels, settings.max_boxes))
    loading = ValLoaderSettings(imgsz, settings.batch_size, settings.workers)
    predict, loader = prepare_scoring(weights, scored, backend, loading, half=settings.half, augment=settings.augment,
                                      slicing=SliceSettings.asked(settings, settings.batch_size))
    return backend, predict, loader


def score(settings: ValSettings, weights: str, imgsz: int) -> EvalResult:
    """mAP and speed of one checkpoint at one size, nothing written (a --task study point)."""
    thresholds = settings.nms
    backend, predict, loader = _prepare(settings, weights, imgsz)
    evaluator = CocoEvaluator.for_split(loader.split, settings.evaluator)
    result = evaluate(predict, loader, backend, evaluator, thresholds, PassOptions(settings.progress))
    LOGGER.info("%s at %d: mAP50 %.4f, mAP50-95 %.4f; %s", weights, imgsz, result.metrics.map50,
                result.metrics.map50_95, result.speed)
    return result


def speed(settings: ValSettings) -> Speed:
    """yolov5's --task speed for the --weights (several: their ensemble): ms per image of each stage at conf 0.25 and
    IoU 0.45, no mAP."""
    backend, predict, loader = _prepare(settings, settings.weights, settings.imgsz)
    thresholds = dataclasses.replace(SPEED_SETTINGS, max_det=settings.max_det)
    measured, images = measure_speed(predict, loader, backend, thresholds, progress=settings.progress)
    LOGGER.info("%s: %d images, %s at shape (%d, 3, %d, %d), conf %.2f, IoU %.2f", " + ".join(settings.weights),
                images, measured, settings.batch_size, loader.imgsz, loader.imgsz, thresholds.conf_threshold,
                thresholds.iou_threshold)
    return measured


def validate(settings: ValSettings) -> EvalResult:
    """Score the --weights (several: their ensemble) on its data split, with the optional outputs (a train, val or
    test task)."""
    thresholds = settings.nms
    backend, predict, loader = _prepare(settings, settings.weights, settings.imgsz)
    save_dir = make_run_dir(settings.project, settings.name, settings.exist_ok)
    evaluator = CocoEvaluator.for_split(loader.split, settings.evaluator)
    outputs = ValOutputs(save_dir, loader.split, settings.save_txt, settings.save_conf, settings.plots)
    result = evaluate(predict, loader, backend, evaluator, thresholds, PassOptions(settings.progress, outputs.add))
    outputs.finish(result.metrics)
    at = f"in windows of {predict.settings.size} px" if isinstance(predict, SlicedPredictor) else f"at {loader.imgsz} px"
    LOGGER.info("%s, %s split: %d images %s\n%s", settings.data, settings.task, result.images, at,
                metrics_table(result.metrics, per_class=settings.verbose))
    if settings.verbose:
        LOGGER.info("pycocotools bbox stats:\n%s", coco_stats(result.metrics))
    LOGGER.info("%s; COCO evaluation by %s", result.speed, evaluator.backend)
    if result.problems:
        LOGGER.warning("%s", problems_list(result.problems))
    if settings.save_json:
        LOGGER.info("COCO results json: %s", evaluator.save_json(save_dir / "predictions.json"))
        if evaluator.json_file is None:  # ground truth built from txt labels: write it, so both files rescore
            LOGGER.info("its ground truth: %s", evaluator.save_ground_truth(save_dir / "ground_truth.json"))
    LOGGER.info("results saved to %s", save_dir)
    return result


def validate_ensemble(settings: ValSettings) -> EvalResult:
    """The ensemble of the --weights scored once, with the outputs (first: members with different classes are refused
    before any scoring), then each member alone (nothing written); the ensemble's mAPs are printed above each
    member's."""
    result = validate(settings)
    members = [score(settings, weights, settings.imgsz) for weights in settings.weights]
    rows = [("ensemble", result), *zip(settings.weights, members)]
    LOGGER.info("ensemble against its members:\n%10s %10s  weights\n%s", "mAP50", "mAP50-95",
                "\n".join(f"{each.metrics.map50:10.4f} {each.metrics.map50_95:10.4f}  {name}" for name, each in rows))
    return result


main = cli.main_for(parse_args, run_tasks)


if __name__ == "__main__":
    cli.exit_process(main())
