"""Text reports of evaluation results: the summary row, the per-class table, the 12 COCO stats, unread files, and what
a score means to someone who has not met COCO's metrics."""

from __future__ import annotations

from collections.abc import Sequence

from detect.evaluation.evaluator import COCO_STAT_NAMES, Metrics

HEADER = f"{'Class':>22}{'Instances':>11}{'P':>11}{'R':>11}{'mAP50':>11}{'mAP50-95':>11}"


def _row(name: str, instances: int, p: float, r: float, ap50: float, ap: float) -> str:
    return f"{name:>22}{instances:>11}{p:>11.3f}{r:>11.3f}{ap50:>11.3f}{ap:>11.3f}"


def metrics_table(metrics: Metrics, per_class: bool = False) -> str:
    """The 'all' row, and one row per class with ground truth when `per_class`."""
    lines = [HEADER, _row("all", sum(metrics.class_instances), metrics.precision, metrics.recall,
                          metrics.map50, metrics.map50_95)]
    if per_class:
        for k, name in enumerate(metrics.class_names):
            if metrics.class_instances[k]:
                lines.append(_row(name, metrics.class_instances[k], metrics.class_precision[k],
                                  metrics.class_recall[k], metrics.class_ap50[k], metrics.class_ap50_95[k]))
    return "\n".join(lines)


def coco_stats(metrics: Metrics) -> str:
    """The 12 pycocotools bbox stats, one per line."""
    return "\n".join(f"{name:>10}: {value:.4f}" for name, value in zip(COCO_STAT_NAMES, metrics.stats))


def problems_list(problems: Sequence[str]) -> str:
    """The files that could not be read, counted and named one per line ("" when there are none)."""
    if not problems:
        return ""
    header = f"unreadable files, left out of the scores: {len(problems)}"
    return "\n".join([header] + [f"  {problem}" for problem in problems])


# mAP@0.5 bands for the words a run ends with (a judgement, not a standard): from 0.5 most objects are found with a box
# that overlaps them by half or more; under 0.1 the model has learned next to nothing (an untrained one scores 0.00x).
FINDS_MOST, FINDS_SOME = 0.5, 0.1


def score_meaning(map50: float) -> str:
    """What a mAP@0.5 says in words, and what would raise it."""
    if map50 >= FINDS_MOST:
        return "it finds most of the objects, each box overlapping its object by half or more"
    if map50 >= FINDS_SOME:
        return "it finds some of the objects: more epochs (or a larger --imgsz) find more"
    return ("it has learned next to nothing yet: a model trained from scratch needs many epochs (yolov5 trains COCO "
            "for 300), and the first max(3 epochs, 100 batches) are warm-up")
