"""The final evaluation of a training run: its best.pt (else last.pt) scored as the published numbers are
(docs/yolov5.md, "Validation during training"), on one rank or spread over the ranks of a job."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from detect.backend import Backend
from detect.data import Loader
from detect.data.categories import is_coco
from detect.evaluation.evaluator import CocoEvaluator, Metrics
from detect.evaluation.report import metrics_table
from detect.evaluation.val_loop import WHOLE_PASS, EvalSettings, PassOptions, Predict, evaluate
from detect.evaluation.val_outputs import ValOutputs

LOGGER = logging.getLogger(__name__)


def final_evaluation(predict: Predict, weights: Path, loader: Loader, evaluator: CocoEvaluator | None,
                     backend: Backend, save_dir: Path, plots: bool = True,
                     options: PassOptions = WHOLE_PASS) -> Metrics | None:
    """`predict`, the model read from `weights` fused and in fp32 (TorchInference; in a tiled run windows of each
    full-resolution image run through it), scored with NMS IoU 0.65 on COCO (the published numbers) else 0.6; the PR
    curve, confusion matrix and predictions grid into save_dir (unless not `plots`), the per-class table logged.
    With `options.exchange`, `loader` is this rank's shard and the rank holding `evaluator` scores and writes;
    `options.stop` ends the pass early (evaluate)."""
    split = loader.split
    settings = EvalSettings(iou_threshold=0.65 if is_coco(split.names) else 0.6)
    outputs = ValOutputs(save_dir, split, save_txt=False, save_conf=False, plots=plots) if evaluator else None
    if evaluator is not None:
        evaluator.reset()
    on_image = outputs.add if outputs else None
    result = evaluate(predict, loader, backend, evaluator, settings, dataclasses.replace(options, on_image=on_image))
    if result is None:
        return None
    outputs.finish(result.metrics)
    LOGGER.info("%s (%d images)\n%s", weights, result.images, metrics_table(result.metrics, per_class=True))
    return result.metrics
