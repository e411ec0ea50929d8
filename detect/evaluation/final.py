"""The final evaluation of a training run: its best.pt (else last.pt) scored as the published numbers are
(docs/yolov5.md, "Validation during training"), on one rank or spread over the ranks of a job."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from detect.backend import Backend
from detect.data import Loader
from detect.data.categories import is_coco
from detect.evaluation.evaluator import CocoEvaluator, Metrics
from detect.evaluation.report import metrics_table
from detect.evaluation.val_loop import EvalSettings, RankExchange, evaluate
from detect.evaluation.val_outputs import ValOutputs
from detect.inference.predictor import Predictor
from detect.inference.runtimes.torch_model import TorchInference
from detect.inference.slicing import SlicedPredictor, SliceSettings
from detect.models import DetectionModel

LOGGER = logging.getLogger(__name__)


def final_evaluation(model: DetectionModel, weights: Path, loader: Loader, evaluator: CocoEvaluator | None,
                     backend: Backend, save_dir: Path, progress: bool = True, plots: bool = True,
                     exchange: RankExchange | None = None, stop: Callable[[], bool] | None = None,
                     slicing: SliceSettings | None = None) -> Metrics | None:
    """`model` (read from `weights`) fused, in fp32, NMS IoU 0.65 on COCO (the published numbers) else 0.6; the PR
    curve, confusion matrix and predictions grid into save_dir (unless not `plots`), the per-class table logged.
    With `exchange`, `loader` is this rank's shard and the rank holding `evaluator` scores and writes; `stop` ends the
    pass early (evaluate); `slicing`: a tiled run's windows of each full-resolution image (the loader's images are).
    (More than eight parameters: each is a separate thing the trainer holds, and a settings object would only be
    built to be taken apart here.)"""
    predict = TorchInference(model, backend)
    if slicing is not None:
        predict = SlicedPredictor(Predictor(predict), backend, slicing, predict.stride)
    split = loader.split
    settings = EvalSettings(iou_threshold=0.65 if is_coco(split.names) else 0.6)
    outputs = ValOutputs(save_dir, split, save_txt=False, save_conf=False, plots=plots) if evaluator else None
    if evaluator is not None:
        evaluator.reset()
    result = evaluate(predict, loader, backend, evaluator, settings, progress=progress,
                      on_image=outputs.add if outputs else None, exchange=exchange, stop=stop)
    if result is None:
        return None
    outputs.finish(result.metrics)
    LOGGER.info("%s (%d images)\n%s", weights, result.images, metrics_table(result.metrics, per_class=True))
    return result.metrics
