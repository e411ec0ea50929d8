"""One pass of a model over a validation loader: device pre-processing, inference, NMS, COCO scoring."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Protocol

import torch
from tqdm import tqdm

from detect.backend import Backend
from detect.data import Batch, LetterboxInfo, Loader, boxes_to_original
from detect.data.device_batch import to_device_batch
from detect.evaluation.evaluator import CocoEvaluator, Metrics
from detect.inference.predictor import Predictor
from detect.inference.slicing import SlicedPredictor

# What a pass scores: a Predictor (sliced or not), or a plain callable such as DetectionModel.predict, (B, 3, H, W) float images in
# [0, 1] on the backend's device -> (B, N, 5+nc) decoded rows [cx, cy, w, h (input pixels), obj, class scores...].
Predict = Predictor | SlicedPredictor | Callable[[torch.Tensor], torch.Tensor]


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """NMS settings of record for validation (docs/yolov5.md, "NMS": conf 0.001, IoU 0.6, 300 per image)."""

    conf_threshold: float = 0.001
    iou_threshold: float = 0.6
    max_det: int = 300


# yolov5 val.py --task speed times detection at predict's thresholds, conf 0.25 and IoU 0.45; an mAP at conf 0.25 is
# not the one of record (docs/yolov5.md, "NMS": 0.001), so measure_speed scores nothing.
SPEED_SETTINGS = EvalSettings(conf_threshold=0.25, iou_threshold=0.45)


@dataclasses.dataclass(frozen=True)
class Speed:
    """Milliseconds per image of each stage."""

    preprocess: float
    inference: float
    nms: float

    def __str__(self) -> str:
        return (f"Speed: {self.preprocess:.1f} ms pre-process, {self.inference:.1f} ms inference, "
                f"{self.nms:.1f} ms NMS per image")


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """Scores of one validation pass, its speed, the images seen, and the files that could not be read."""

    metrics: Metrics
    speed: Speed
    images: int
    problems: tuple[str, ...]  # "<path>: <reason>", one per unreadable file; those images are not scored


@dataclasses.dataclass(frozen=True)
class ImageDetections:
    """One image's detections in original-image pixels, handed to optional per-image consumers."""

    image_id: int
    path: str
    letterbox: LetterboxInfo
    detections: torch.Tensor  # (n, 6) [x1, y1, x2, y2, score, class], original-image pixels, on the CPU


STAGES = ("preprocess", "inference", "nms")


def _speed(seconds: dict[str, float], images: int) -> Speed:
    return Speed(**{stage: 1000 * total / max(images, 1) for stage, total in seconds.items()})


def _detections(predictor: Predictor, batch: Batch, backend: Backend, settings: EvalSettings,
                seconds: dict[str, float]) -> list[torch.Tensor]:
    """Per-image (n, 6) detections in input pixels for one batch; each stage's wall time is added to `seconds`, the
    device synchronised at each end so that the times are real."""
    if isinstance(predictor, SlicedPredictor):
        return _sliced_detections(predictor, batch, backend, settings, seconds)
    backend.synchronize()
    ends = [time.perf_counter()]
    images = to_device_batch(batch, backend).images
    backend.synchronize()
    ends.append(time.perf_counter())
    output = predictor.predict(images)
    backend.synchronize()
    ends.append(time.perf_counter())
    found = predictor.detections(output, backend, conf_threshold=settings.conf_threshold,
                                 iou_threshold=settings.iou_threshold, max_det=settings.max_det)
    backend.synchronize()
    ends.append(time.perf_counter())
    for stage, start, end in zip(STAGES, ends, ends[1:]):
        seconds[stage] += end - start
    return found


def _sliced_detections(predictor: SlicedPredictor, batch: Batch, backend: Backend, settings: EvalSettings,
                       seconds: dict[str, float]) -> list[torch.Tensor]:
    """Per-image detections by sliced inference of a batch of full-resolution images (their own pixels); windows,
    model calls and the merge count as inference (batch.images are channels-last: an image's (h, w, 3) is a view)."""
    start = time.perf_counter()
    found = [predictor.detect(image.permute(1, 2, 0).numpy(), conf_threshold=settings.conf_threshold,
                              iou_threshold=settings.iou_threshold, max_det=settings.max_det)
             for image in batch.images]
    backend.synchronize()
    seconds["inference"] += time.perf_counter() - start
    return found


@dataclasses.dataclass(frozen=True)
class ShardPredictions:
    """One process's inference over its loader, before scoring: per batch, the scored images' detections (an
    unreadable image is left out: its id is in `unusable`), the problem lines, and the stage times."""

    batches: tuple[tuple[ImageDetections, ...], ...]
    unusable: frozenset[int]
    problems: tuple[str, ...]
    images: int
    seconds: dict[str, float]  # total wall seconds per stage
    stopped: bool = False  # a stop was asked before the loader's end


class EvaluationStopped(Exception):
    """A pass cut short because a stop was asked (a signal) on some process of the job."""


class RankExchange(Protocol):
    """How the ranks of a job share one pass: each predicts its shard of the batches, then they agree whether any was
    stopped, and the shards go to the rank that scores."""

    def any_stopped(self, stopped: bool) -> bool:
        """Whether this rank or another one was stopped (every rank calls it once per pass)."""

    def gather(self, shard: ShardPredictions) -> list[ShardPredictions] | None:
        """Every rank's shard in rank order on the scoring rank; None elsewhere."""


@dataclasses.dataclass(frozen=True)
class PassOptions:
    """How a pass runs besides what it scores: its progress bar; `on_image` sees every scored image's boxes; with
    `exchange`, the loader is this rank's shard of a job's pass; when `stop()` turns true the pass ends early."""

    progress: bool = True
    on_image: Callable[[ImageDetections], None] | None = None
    exchange: RankExchange | None = None
    stop: Callable[[], bool] | None = None


WHOLE_PASS = PassOptions()  # a progress bar, nothing else


@torch.no_grad()
def predict_shard(predict: Predict, loader: Loader, backend: Backend, settings: EvalSettings = EvalSettings(), *,
                  progress: bool = True, stop: Callable[[], bool] | None = None) -> ShardPredictions:
    """Detections (original-image pixels, on the CPU) of every image `loader` yields; when `stop()` turns true, the
    pass ends after the batch at hand (`stopped`)."""
    predictor = predict if isinstance(predict, Predictor | SlicedPredictor) else Predictor(predict)
    seconds, images, unusable, batches = dict.fromkeys(STAGES, 0.0), 0, set(), []
    problems: dict[str, None] = {}  # a dict keeps the lines in first-seen order without repeats
    for batch in tqdm(loader, desc="val", disable=not progress, leave=False):
        if stop is not None and stop():
            return ShardPredictions(tuple(batches), frozenset(unusable), tuple(problems), images, seconds,
                                    stopped=True)
        problems.update(dict.fromkeys(batch.problems))
        unusable.update(batch.unusable_ids)
        scored = []
        for index, detections in enumerate(_detections(predictor, batch, backend, settings, seconds)):
            if batch.image_ids[index] in unusable:
                continue
            info, detections = batch.letterbox[index], detections.cpu()
            detections = torch.cat((boxes_to_original(detections[:, :4], info), detections[:, 4:]), dim=1)
            scored.append(ImageDetections(batch.image_ids[index], batch.paths[index], info, detections))
        batches.append(tuple(scored))
        images += len(batch)
    return ShardPredictions(tuple(batches), frozenset(unusable), tuple(problems), images, seconds)


def merge_shards(shards: list[ShardPredictions]) -> ShardPredictions:
    """One pass's predictions from the shards of ranks that took batches rank, rank + world, ... (the val loader's
    `rank`/`world_size`), in the batch order of a one-process pass."""
    world, count = len(shards), sum(len(shard.batches) for shard in shards)
    batches = tuple(shards[position % world].batches[position // world] for position in range(count))
    problems = dict.fromkeys(line for shard in shards for line in shard.problems)
    seconds = {stage: sum(shard.seconds[stage] for shard in shards) for stage in shards[0].seconds}
    return ShardPredictions(batches, frozenset().union(*(shard.unusable for shard in shards)),
                            tuple(problems), sum(shard.images for shard in shards), seconds)


def score(predictions: ShardPredictions, evaluator: CocoEvaluator,
          on_image: Callable[[ImageDetections], None] | None = None) -> EvalResult:
    """COCO metrics of a pass's predictions; `on_image` sees every scored image in batch order."""
    for batch in predictions.batches:
        for image in batch:
            evaluator.add(image.image_id, image.detections)
            if on_image is not None:
                on_image(image)
    unusable = predictions.unusable
    scored = [image_id for image_id in evaluator.image_ids() if image_id not in unusable] if unusable else None
    return EvalResult(evaluator.evaluate(image_ids=scored), _speed(predictions.seconds, predictions.images),
                      predictions.images, predictions.problems)


def evaluate(predict: Predict, loader: Loader, backend: Backend, evaluator: CocoEvaluator | None,
             settings: EvalSettings = EvalSettings(), options: PassOptions = WHOLE_PASS) -> EvalResult | None:
    """Score `predict` (e.g. an eval-mode model's `predict`, on the backend's device) over `loader`; `options.on_image`
    sees every scored image's boxes. With `options.exchange`, `loader` is this rank's shard of the split and the rank
    that gets every shard scores them (it alone needs `evaluator`); the others return None. When `options.stop()`
    turns true on any rank, each ends its shard after the batch at hand and the pass raises EvaluationStopped on every
    rank.

    An image the loader could not read (a grey placeholder in `batch.unusable_ids`) is left out of the scores
    and of `on_image`, and named in the result's problems; an image the loader never yields counts as missed.
    """
    predictions = predict_shard(predict, loader, backend, settings, progress=options.progress, stop=options.stop)
    exchange = options.exchange
    stopped = predictions.stopped if exchange is None else exchange.any_stopped(predictions.stopped)
    if stopped:
        raise EvaluationStopped
    if exchange is not None:
        shards = exchange.gather(predictions)
        if shards is None:
            return None
        predictions = merge_shards(shards)
    return score(predictions, evaluator, options.on_image)


@torch.no_grad()
def measure_speed(predict: Predict, loader: Loader, backend: Backend, settings: EvalSettings = SPEED_SETTINGS, *,
                  progress: bool = True) -> tuple[Speed, int]:
    """Milliseconds per image of pre-processing, inference and NMS over `loader`, and the images seen; nothing is
    scored (yolov5's --task speed)."""
    predictor = predict if isinstance(predict, Predictor | SlicedPredictor) else Predictor(predict)
    seconds, images = dict.fromkeys(STAGES, 0.0), 0
    for batch in tqdm(loader, desc="speed", disable=not progress, leave=False):
        _detections(predictor, batch, backend, settings, seconds)
        images += len(batch)
    return _speed(seconds, images), images
