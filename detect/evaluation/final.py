"""The final evaluation of a training run: its best.pt (else last.pt) scored as the published numbers are (YOLOV5-FACTS.md)."""

from __future__ import annotations

import logging
from pathlib import Path

from detect.backend import Backend
from detect.data import Loader
from detect.data.categories import is_coco
from detect.evaluation.evaluator import CocoEvaluator, Metrics
from detect.evaluation.loop import EvalSettings, evaluate
from detect.evaluation.outputs import ValOutputs
from detect.evaluation.report import metrics_table
from detect.inference.model import TorchInference
from detect.models.weights import load_model

LOGGER = logging.getLogger(__name__)


def final_evaluation(weights: Path, loader: Loader, evaluator: CocoEvaluator, backend: Backend, save_dir: Path,
                        progress: bool = True, plots: bool = True) -> Metrics:
    """`weights` fused, in fp32, NMS IoU 0.65 on COCO (the published numbers) else 0.6; the PR curve, confusion
    matrix and predictions grid into save_dir (unless not `plots`), the per-class table logged."""
    model = TorchInference(load_model(weights), backend)
    split = loader.split
    settings = EvalSettings(iou_threshold=0.65 if is_coco(split.names) else 0.6)
    outputs = ValOutputs(save_dir, split, save_txt=False, save_conf=False, plots=plots)
    evaluator.reset()
    result = evaluate(model, loader, backend, evaluator, settings, progress=progress, on_image=outputs.add)
    outputs.finish(result.metrics)
    LOGGER.info("%s (%d images)\n%s", weights, result.images, metrics_table(result.metrics, per_class=True))
    return result.metrics
