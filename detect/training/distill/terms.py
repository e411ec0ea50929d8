"""The distillation terms (docs/usage.md, "Distillation"), pure functions of the student's and the teacher's tensors,
computed in fp32 whatever autocast gave; each is exactly zero where the student's tensors are the teacher's:
- the feature term, on the maps the Detect heads read: each level's projected student map and the teacher's map,
  both normalised per channel (zero mean, unit variance over the batch and the cells), their squared distance
  averaged over the channels, and the cells averaged with weights the teacher's best score at each cell;
- the logit term, on the heads' raw outputs, anchor by anchor: the objectness as a Bernoulli KL divergence over
  every cell, and where the teacher scores (its scores as weights) the classes' KL divergence and the box's squared
  distance (centre offsets and log sizes, in grid units, each model's box decoded with its own anchors).
Both are the mean over the levels."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

NORM_EPS = 1e-5  # BatchNorm's: the normalisation is BatchNorm's without its parameters and running statistics
WEIGHT_EPS = 1e-9  # a batch whose teacher scores nothing leaves the weighted terms at 0, not NaN


def teacher_scores(raw: Tensor) -> Tensor:
    """(B, na, ny, nx, 5+nc) raw outputs -> (B, na, ny, nx): yolov5's detection score, objectness x the best class's
    probability."""
    probabilities = raw[..., 4:].float().sigmoid()
    return probabilities[..., 0] * probabilities[..., 1:].amax(-1)


def normalised(maps: Tensor) -> Tensor:
    """(B, C, H, W) with each channel at zero mean and unit variance over the batch and the cells."""
    return F.batch_norm(maps.float(), None, None, training=True, eps=NORM_EPS)


def _weighted_mean(values: Tensor, weights: Tensor) -> Tensor:
    return (values * weights).sum() / weights.sum().clamp(min=WEIGHT_EPS)


def feature_term(student: list[Tensor], teacher: list[Tensor], teacher_raw: list[Tensor]) -> Tensor:
    """student: the projected student maps, teacher: the teacher's, (B, C, H, W) per level alike; teacher_raw: the
    teacher's raw outputs per level, whose best score over the anchors weighs each cell. Returns a 0-D tensor."""
    terms = []
    for projected, taught, raw in zip(student, teacher, teacher_raw, strict=True):
        distance = (normalised(projected) - normalised(taught)).square().mean(1)  # (B, H, W)
        terms.append(_weighted_mean(distance, teacher_scores(raw).amax(1)))
    return torch.stack(terms).mean()


def bernoulli_kl(student_logits: Tensor, teacher_logits: Tensor) -> Tensor:
    """Element-wise KL(teacher || student) of the Bernoulli distributions the logits give: the cross-entropy to the
    teacher's probability less the teacher's own entropy."""
    target = teacher_logits.sigmoid()
    return (F.binary_cross_entropy_with_logits(student_logits, target, reduction="none")
            - F.binary_cross_entropy_with_logits(teacher_logits, target, reduction="none"))


def logit_term(student: list[Tensor], teacher: list[Tensor], student_anchors: Tensor,
               teacher_anchors: Tensor) -> Tensor:
    """student, teacher: raw outputs per level, (B, na, ny, nx, 5+nc) alike; *_anchors: (nl, na, 2) each model's
    anchors in grid units. Returns a 0-D tensor."""
    terms = []
    for level, (learner, taught) in enumerate(zip(student, teacher, strict=True)):
        learner, taught = learner.float(), taught.float()
        objectness = bernoulli_kl(learner[..., 4], taught[..., 4]).mean()
        classes = bernoulli_kl(learner[..., 5:], taught[..., 5:]).mean(-1)
        # yolov5's decode (docs/yolov5.md, "Decode"): centre 2s - 0.5, size (2s)^2 x anchor, so the log sizes differ
        # by twice the log-sigmoids' difference plus the anchors' log ratio.
        centre = 2 * (learner[..., :2].sigmoid() - taught[..., :2].sigmoid())
        ratio = (student_anchors[level].float() / teacher_anchors[level].float()).log()[None, :, None, None]
        size = 2 * (F.logsigmoid(learner[..., 2:4]) - F.logsigmoid(taught[..., 2:4])) + ratio
        box = centre.square().sum(-1) + size.square().sum(-1)
        terms.append(objectness + _weighted_mean(classes + box, teacher_scores(taught)))
    return torch.stack(terms).mean()
