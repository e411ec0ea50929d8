"""COCO mAP by pycocotools' COCOeval (the metric of record), or faster-coco-eval with the same numbers.

"auto" (the default) is faster-coco-eval when it is installed, else pycocotools: faster-coco-eval 1.8 gives the same
12 stats (to 1e-9 on the cocoapi reference; identical on 5,000 images x 300 detections, in 28 s against 94 s:
python scripts/bench_scale.py --phases eval, docs/scale.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from detect.atomic_file import write_text
from detect.data.annotations.coco_values import read_coco_json
from detect.data.categories import json_categories, yolo_category_ids
from detect.data.labels.split import LabelledSplit
from detect.data.records import ImageRecord
from detect.errors import UserError, short_repr
from detect.evaluation.ground_truth import ground_truth_as_read, ground_truth_from_records, numbered_for_scoring
from detect.ops.boxes import xyxy_to_ltwh

logger = logging.getLogger(__name__)

# The 12 numbers COCOeval.summarize() prints, in its order.
COCO_STAT_NAMES = ("AP", "AP50", "AP75", "AP_small", "AP_medium", "AP_large",
                   "AR1", "AR10", "AR100", "AR_small", "AR_medium", "AR_large")
BACKENDS = ("auto", "pycocotools", "faster-coco-eval")


@dataclasses.dataclass(frozen=True, eq=False)
class Metrics:
    """Evaluation result; per-class tuples are indexed by class id, NaN where a class has no ground truth."""

    map50_95: float
    map50: float
    precision: float  # mean over classes at the best-F1 confidence (see best_f1_precision_recall)
    recall: float
    stats: tuple[float, ...]  # the 12 COCO stats, COCO_STAT_NAMES order
    class_names: tuple[str, ...]
    class_ap50_95: tuple[float, ...]
    class_ap50: tuple[float, ...]
    class_precision: tuple[float, ...]
    class_recall: tuple[float, ...]
    class_instances: tuple[int, ...]  # non-crowd ground-truth boxes per class
    f1_confidence: float
    recall_thresholds: np.ndarray  # (101,) COCO recall grid
    precision_curves: np.ndarray  # (nc, 101) interpolated precision at IoU 0.5, all areas; -1 without GT

    @property
    def fitness(self) -> float:
        """0.1 * mAP@0.5 + 0.9 * mAP@0.5:0.95, the score for "best" (docs/yolov5.md, "Validation during training")."""
        return 0.1 * self.map50 + 0.9 * self.map50_95


def resolve_backend(backend: str) -> str:
    """The backend `backend` names: "auto" is faster-coco-eval when installed, else pycocotools."""
    if backend != "auto":
        return backend
    return "faster-coco-eval" if importlib.util.find_spec("faster_coco_eval") else "pycocotools"


def _coco_classes(backend: str) -> tuple[Any, Any]:
    """(COCO, COCOeval) classes of the chosen backend (not "auto": resolve it first)."""
    if backend == "pycocotools":
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval

        return COCO, COCOeval
    if backend == "faster-coco-eval":
        try:
            from faster_coco_eval import COCO, COCOeval_faster
        except ImportError as error:
            message = "evaluator backend faster-coco-eval is not installed: `pip install faster-coco-eval`"
            raise UserError(message) from error
        return COCO, COCOeval_faster
    raise UserError(f"unknown evaluator backend {short_repr(backend)}; choose one of {', '.join(BACKENDS)}")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Capture what pycocotools prints and pass it to the debug log instead of stdout."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield
    if buffer.getvalue().strip():
        logger.debug("%s", buffer.getvalue().rstrip())


class CocoEvaluator:
    """Accumulates detections per image and scores them with COCOeval against in-memory ground truth."""

    def __init__(self, ground_truth: dict, category_ids: Sequence[int], class_names: Sequence[str],
                 backend: str = "auto", json_file: Path | None = None) -> None:
        """ground_truth: a COCO instances dict; class k is category_ids[k] and is called class_names[k].

        json_file: the file the ground truth was read from; None when it was built from YOLO txt labels.
        """
        if len(category_ids) != len(class_names):
            raise ValueError(f"{len(category_ids)} category ids for {len(class_names)} class names")
        self.backend, self.json_file = resolve_backend(backend), json_file  # backend: the name the speed line shows
        self.coco_class, self.eval_class = _coco_classes(self.backend)
        self.category_ids = tuple(int(c) for c in category_ids)
        self.class_names = tuple(class_names)
        self._category_index = {category: index for index, category in enumerate(self.category_ids)}
        with _quiet():
            self.ground_truth = self.coco_class()
            self.ground_truth.dataset = ground_truth
            self.ground_truth.createIndex()
        self._results: list[dict] = []

    @classmethod
    def from_coco_json(cls, path: Path | str, backend: str = "auto") -> CocoEvaluator:
        """Ground truth from a COCO instances json (its values as tools type them, read once into one form:
        data/annotations/coco_values.py), class order by data/categories.json_categories."""
        path = Path(path)
        if not path.is_file():
            raise UserError(f"COCO annotations not found: {path} (put the instances_*.json there)")
        dataset = read_coco_json(path)
        dataset["annotations"] = numbered_for_scoring(dataset["annotations"], path)
        categories = json_categories(dataset["categories"])
        return cls(dataset, [c["id"] for c in categories], [c["name"] for c in categories], backend, path)

    @classmethod
    def for_split(cls, split: LabelledSplit, backend: str = "auto") -> CocoEvaluator:
        """The COCO ground truth of a split: what its instances json says of the images that were read, when it has
        one (crowd regions and segment areas as COCO's own evaluation counts them), else built from its labels."""
        if split.coco_json is None:
            return cls.from_records(split.records, split.names, backend)
        ground_truth = ground_truth_as_read(read_coco_json(split.coco_json), split.records, split.coco_json)
        return cls(ground_truth, split.category_ids, split.names, backend, split.coco_json)

    @classmethod
    def from_records(cls, records: Sequence[ImageRecord], class_names: Sequence[str],
                     backend: str = "auto") -> CocoEvaluator:
        """Ground truth built from YOLO-format records, ids by data/categories.yolo_category_ids."""
        category_ids = yolo_category_ids(class_names)
        ground_truth = ground_truth_from_records(records, class_names, category_ids)
        return cls(ground_truth, category_ids, class_names, backend)

    def add(self, image_id: int, detections: torch.Tensor | np.ndarray) -> None:
        """Add one image's (n, 6) detections [x1, y1, x2, y2 (original-image pixels), score, class]."""
        rows = detections.detach().cpu().double().numpy() if isinstance(detections, torch.Tensor) else detections
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, 6)
        for box, score, cls in zip(xyxy_to_ltwh(rows[:, :4]).tolist(), rows[:, 4].tolist(), rows[:, 5].tolist()):
            self._results.append({"image_id": int(image_id), "category_id": self.category_ids[int(cls)],
                                  "bbox": box, "score": score})

    def reset(self) -> None:
        """Forget the accumulated detections (keeps the ground truth), e.g. before the next epoch's validation."""
        self._results = []

    def add_coco_results(self, results: Iterable[dict]) -> None:
        """Add detections already in COCO results format (image_id, category_id, bbox xywh, score)."""
        self._results.extend(dict(result) for result in results)

    def results(self) -> list[dict]:
        """The accumulated detections as a COCO results list, boxes rounded to 3 decimals, scores to 5."""
        return [{"image_id": r["image_id"], "category_id": r["category_id"],
                 "bbox": [round(float(v), 3) for v in r["bbox"]], "score": round(float(r["score"]), 5)}
                for r in self._results]

    def save_json(self, path: Path | str) -> Path:
        """Write the COCO results json (what --save-json produces) and return its path."""
        return _write_json(path, self.results())

    def save_ground_truth(self, path: Path | str) -> Path:
        """Write the ground truth as a COCO instances json (same category ids as the results) and return its path."""
        return _write_json(path, self.ground_truth.dataset)

    def image_ids(self) -> list[int]:
        """The ids of the ground-truth images."""
        return list(self.ground_truth.getImgIds())

    def evaluate(self, image_ids: Sequence[int] | None = None) -> Metrics:
        """Run COCOeval (bbox, default parameters) over the given images (default: every ground-truth image)."""
        known = set(self.image_ids())
        unknown = sorted({int(r["image_id"]) for r in self._results} - known)
        if unknown:
            raise UserError(f"detections for image ids not in the ground truth: {unknown[:5]} (wrong dataset?)")
        subset = None if image_ids is None else sorted({int(i) for i in image_ids})
        if not self._results:
            return self._empty_metrics(subset)
        with _quiet():
            detections = self.ground_truth.loadRes([dict(r) for r in self._results])
            coco_eval = self.eval_class(self.ground_truth, detections, "bbox")
            if subset is not None:
                coco_eval.params.imgIds = subset
            # the categories with ground truth, else every class of ours (every stat -1): never COCOeval's own list,
            # which holds the json's categories that no class of ours reads
            coco_eval.params.catIds = self._annotated_categories(subset) or list(self.category_ids)
            coco_eval.evaluate()
            coco_eval.accumulate()
            coco_eval.summarize()
        return self._metrics(coco_eval, subset)

    def _annotated_categories(self, image_ids: Sequence[int] | None) -> list[int]:
        """The categories with a ground-truth box on the given images (default: all), in id order. COCOeval scores
        only these: a category without one is -1 in every array and left out of every mean, so the stats are the
        same, while the arrays (97 KB a category) follow the classes present, not nc (2 GB at 20,000 classes)."""
        wanted = None if image_ids is None else set(image_ids)
        found = {annotation["category_id"] for annotation in self.ground_truth.dataset["annotations"]
                 if wanted is None or annotation["image_id"] in wanted}
        return sorted(found & set(self.category_ids))

    def _instances(self, image_ids: Sequence[int] | None) -> tuple[int, ...]:
        """Non-crowd ground-truth boxes per class, on the given images (default: all)."""
        counts = [0] * len(self.category_ids)
        wanted = None if image_ids is None else set(image_ids)
        for annotation in self.ground_truth.dataset["annotations"]:
            index = self._category_index.get(annotation["category_id"])
            on_wanted_image = wanted is None or annotation["image_id"] in wanted
            if index is not None and on_wanted_image and not annotation.get("iscrowd", 0):
                counts[index] += 1
        return tuple(counts)

    def _metrics(self, coco_eval: Any, image_ids: Sequence[int] | None) -> Metrics:
        """Metrics from an accumulated COCOeval; per-class AP averages its precision array like summarize(). The
        classes COCOeval did not score (no ground truth) are NaN, their precision curves -1."""
        # precision and scores: (iou thresholds 10, recall 101, categories, areas 4, max dets 3); -1 = no GT.
        precision = np.asarray(coco_eval.eval["precision"])[:, :, :, 0, -1]
        scores = np.asarray(coco_eval.eval["scores"])[:, :, :, 0, -1]
        scored = [self._category_index[category] for category in coco_eval.params.catIds]  # class of each column
        recall_thresholds = np.asarray(coco_eval.params.recThrs, dtype=np.float64)
        best = best_f1_precision_recall(precision[0].T, scores[0].T, recall_thresholds)
        per_class = {"ap50_95": [_mean_valid(precision[:, :, k]) for k in range(len(scored))],
                     "ap50": [_mean_valid(precision[0, :, k]) for k in range(len(scored))],
                     "precision": best.class_precision, "recall": best.class_recall}
        tables = {name: [math.nan] * len(self.category_ids) for name in per_class}
        for name, values in per_class.items():
            for index, value in zip(scored, values):
                tables[name][index] = value
        curves = np.full((len(self.category_ids), len(recall_thresholds)), -1.0)
        curves[scored] = precision[0].T
        stats = tuple(float(s) for s in coco_eval.stats)
        return Metrics(
            map50_95=stats[0], map50=stats[1], precision=best.precision, recall=best.recall, stats=stats,
            class_names=self.class_names, class_ap50_95=tuple(tables["ap50_95"]), class_ap50=tuple(tables["ap50"]),
            class_precision=tuple(tables["precision"]), class_recall=tuple(tables["recall"]),
            class_instances=self._instances(image_ids), f1_confidence=best.confidence,
            recall_thresholds=recall_thresholds, precision_curves=curves,
        )

    def _empty_metrics(self, image_ids: Sequence[int] | None) -> Metrics:
        """Zero metrics when there is not a single detection (COCOeval's loadRes cannot take an empty list)."""
        instances = self._instances(image_ids)
        per_class = tuple(0.0 if count else math.nan for count in instances)
        recall_thresholds = np.linspace(0.0, 1.0, 101)
        curves = np.where(np.array(instances)[:, None] > 0, 0.0, -1.0) * np.ones((len(instances), 101))
        return Metrics(
            map50_95=0.0, map50=0.0, precision=0.0, recall=0.0, stats=(0.0,) * len(COCO_STAT_NAMES),
            class_names=self.class_names, class_ap50_95=per_class, class_ap50=per_class,
            class_precision=per_class, class_recall=per_class, class_instances=instances, f1_confidence=0.0,
            recall_thresholds=recall_thresholds, precision_curves=curves,
        )


def _write_json(path: Path | str, content: Any) -> Path:
    """Write `content` as json to `path` (parents created) and return the path."""
    return write_text(path, json.dumps(content))


def _mean_valid(values: np.ndarray) -> float:
    """Mean of the entries that are not -1 (COCOeval's "no ground truth" mark); NaN when there are none."""
    valid = values[values > -1]
    return float(valid.mean()) if valid.size else math.nan


@dataclasses.dataclass(frozen=True)
class BestF1:
    """Precision and recall at the confidence that maximises the class-mean F1."""

    confidence: float
    precision: float
    recall: float
    class_precision: tuple[float, ...]
    class_recall: tuple[float, ...]


def best_f1_precision_recall(
    precision: np.ndarray, scores: np.ndarray, recall_thresholds: np.ndarray, grid_points: int = 1000
) -> BestF1:
    """P and R at the best-F1 confidence, from COCOeval's accumulated curves at IoU 0.5, all areas.

    precision, scores: (nc, R) COCOeval eval["precision"] / eval["scores"] slices: at recall threshold j the
    interpolated precision reached and the score of the detection that reaches it (-1 / 0 when unreached).
    So a confidence c reaches the largest recall threshold whose score is >= c; P(c) is the precision there.
    F1 is averaged over classes with ground truth on a 1000-point confidence grid (as yolov5 does).
    """
    has_truth = precision[:, 0] > -1
    if not has_truth.any():
        nan = tuple(math.nan for _ in has_truth)
        return BestF1(0.0, 0.0, 0.0, nan, nan)
    confidences = np.linspace(0.0, 1.0, grid_points)
    f1_sum = np.zeros(grid_points)
    for start in range(0, len(precision), F1_CLASS_CHUNK):
        chunk = slice(start, start + F1_CLASS_CHUNK)
        chunk_precision, chunk_recall = _reached_at(precision[chunk], scores[chunk], recall_thresholds, confidences)
        f1 = 2 * chunk_precision * chunk_recall / np.maximum(chunk_precision + chunk_recall, 1e-16)
        f1_sum += f1[has_truth[chunk]].sum(axis=0)
    best = int(np.argmax(f1_sum / has_truth.sum()))
    class_precision, class_recall = (values[:, 0] for values in
                                     _reached_at(precision, scores, recall_thresholds, confidences[best:best + 1]))
    per_precision = tuple(float(p) if t else math.nan for p, t in zip(class_precision, has_truth))
    per_recall = tuple(float(r) if t else math.nan for r, t in zip(class_recall, has_truth))
    return BestF1(
        confidence=float(confidences[best]),
        precision=float(class_precision[has_truth].mean()),
        recall=float(class_recall[has_truth].mean()),
        class_precision=per_precision,
        class_recall=per_recall,
    )


# Classes whose F1 curves are computed at once: (256, 1000, 101) booleans are 26 MB, where V3Det's 13,204 classes at
# once would be 1.3 GB.
F1_CLASS_CHUNK = 256


def _reached_at(precision: np.ndarray, scores: np.ndarray, recall_thresholds: np.ndarray,
                confidences: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """((n, C) precision, (n, C) recall) of n classes at each of C confidences: at the largest recall threshold
    whose score reaches the confidence (0 and 0 where none does)."""
    reached = (scores[:, None, :] >= confidences[None, :, None]) & (precision[:, None, :] > 0)  # (n, C, R)
    any_reached = reached.any(axis=2)
    last = np.where(any_reached, reached.shape[2] - 1 - np.argmax(reached[:, :, ::-1], axis=2), 0)
    recall = np.where(any_reached, recall_thresholds[last], 0.0)
    return np.where(any_reached, np.take_along_axis(precision, last, axis=1), 0.0), recall
