"""The YOLOv5 loss (docs/yolov5.md, "Loss") in fixed shapes: padded targets, masks, no host sync.

Every (offset group, anchor, image, target row) of a level is a candidate match; a mask says which are real. Shapes
depend only on the batch size, the target capacity M and the grids, so the step compiles once
(docs/architecture.md, "Static shapes"). Where data-dependent shapes cost nothing (the CPU: Backend.dynamic_shapes),
`matched_only` scores the real matches alone."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from detect.config import Hyp
from detect.ops.boxes import ciou_paired

# Objectness weight per level (docs/yolov5.md, "Loss"): these for 3 levels, otherwise the first nl of the longer list.
BALANCE_THREE_LEVELS = (4.0, 1.0, 0.4)
BALANCE_OTHER = (4.0, 1.0, 0.25, 0.06, 0.02)
# Cell offsets (subtracted from the centre) in the reference's order: own cell, x-1, y-1, x+1, y+1
# (docs/yolov5.md, "Loss").
CELL_OFFSETS = ((0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (-0.5, 0.0), (0.0, -0.5))
FOCAL_ALPHA = 0.25  # docs/yolov5.md, "Loss"
# Stands in for the boxes of non-matches: CIoU of two such boxes is 1 and finite, so no NaN reaches a gradient.
UNIT_BOX = (0.5, 0.5, 1.0, 1.0)


@dataclasses.dataclass(frozen=True)
class LossSettings:
    """Loss gains (already scaled for levels, classes and image size), BCE pos_weights and matching options."""

    box_gain: float
    obj_gain: float
    cls_gain: float
    cls_pos_weight: float
    obj_pos_weight: float
    anchor_threshold: float
    label_smoothing: float
    focal_gamma: float

    @classmethod
    def from_hyp(cls, hyp: Hyp, num_levels: int, num_classes: int, imgsz: int,
                 label_smoothing: float = 0.0) -> LossSettings:
        """yolov5's gains: box *= 3/nl, cls *= nc/80 * 3/nl, obj *= (imgsz/640)^2 * 3/nl (docs/yolov5.md, "Loss")."""
        return cls(box_gain=hyp.box * (3 / num_levels),
                   obj_gain=hyp.obj * ((imgsz / 640) ** 2 * 3 / num_levels),
                   cls_gain=hyp.cls * (num_classes / 80 * 3 / num_levels),
                   cls_pos_weight=hyp.cls_pw, obj_pos_weight=hyp.obj_pw, anchor_threshold=hyp.anchor_t,
                   label_smoothing=label_smoothing, focal_gamma=hyp.fl_gamma)


def last_write(index: Tensor, values: Tensor, valid: Tensor, size: int) -> Tensor:
    """(size,): at each slot the value of the last valid write in flat order of `index`/`values`, else 0.

    Fixed-shape and deterministic stand-in for `out[index[valid]] = values[valid]` run one write at a time:
    each slot keeps the highest flat position written to it (a max does not depend on the order of atomics).
    """
    order = torch.arange(index.numel(), device=index.device)
    keyed = torch.where(valid.reshape(-1), order, -1)
    winner = torch.full((size,), -1, dtype=order.dtype, device=index.device)
    winner = winner.scatter_reduce(0, index.reshape(-1), keyed, reduce="amax")
    # Slots nothing wrote read a 0 placed after the last value (there may be no values at all).
    written = F.pad(values.reshape(-1), (0, 1))
    return written.gather(0, torch.where(winner >= 0, winner, index.numel()))


class DetectionLoss(nn.Module):
    """YOLOv5's CIoU box, objectness and class loss of raw head outputs against padded targets."""

    def __init__(self, loss_settings: LossSettings, anchors: Tensor, num_classes: int, matched_only: bool = False):
        super().__init__()
        num_levels = anchors.shape[0]
        if num_levels > len(BALANCE_OTHER):
            raise ValueError(f"{num_levels} detection levels: the objectness balance is known for at most 5")
        self.loss_settings = loss_settings
        # The model's live buffer (nl, na, 2), grid units: AutoAnchor rewrites it in place, so hold it, never copy.
        self.anchors = anchors
        self.num_classes = num_classes
        # Score the matched candidates only (data-dependent shapes, one host sync per level), where they cost nothing.
        self.matched_only = matched_only
        self.balance = BALANCE_THREE_LEVELS if num_levels == 3 else BALANCE_OTHER[:num_levels]

    def forward(self, raw: list[Tensor], padded_targets: Tensor) -> tuple[Tensor, Tensor]:
        """raw: per level (B, na, ny, nx, 5 + nc); padded_targets (B, M, 5) [cls, cx, cy, w, h] normalised, cls -1
        on padding. Returns total (box + obj + cls) * B, 0-D, and the detached (3,) [box, obj, cls]."""
        box = obj = cls = padded_targets.new_zeros((), dtype=torch.float32)
        for level, output in enumerate(raw):
            level_box, level_obj, level_cls = self._level(output, padded_targets, self.anchors[level].float())
            box = box + level_box
            obj = obj + level_obj * self.balance[level]
            cls = cls + level_cls
        gains = self.loss_settings
        box, obj, cls = box * gains.box_gain, obj * gains.obj_gain, cls * gains.cls_gain
        return (box + obj + cls) * raw[0].shape[0], torch.stack((box, obj, cls)).detach()

    def _level(self, output: Tensor, targets: Tensor, anchors: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Box, objectness and class loss of one level, before gains and balance."""
        batch, num_anchors, ny, nx, width = output.shape
        mask, index, target_box = self._candidates(targets, anchors, ny, nx)
        # Candidates flattened in the reference's write order (G, na, B, M); box values value-major, (4, C), so that
        # each op runs along long contiguous rows, not over pairs (several times faster).
        shape = mask.shape
        anchor_wh = anchors.t()[:, None, :, None, None].expand(2, *shape).reshape(2, -1)
        target_box = target_box.expand(4, *shape).reshape(4, -1)
        mask, index, classes = mask.reshape(-1), index.reshape(-1), targets[..., 0].expand(shape).reshape(-1)
        if self.matched_only:
            # 2-5% of the candidates match (coco128 mosaics at 320): scoring only those made the loss's forward and
            # backward 5x cheaper on the CPU (scripts/bench_loss.py). nonzero is the host sync this mode allows.
            chosen = mask.nonzero().squeeze(1)
            mask, index, classes = (t.index_select(0, chosen) for t in (mask, index, classes))
            anchor_wh, target_box = (t.index_select(1, chosen) for t in (anchor_wh, target_box))
        # The candidates' rows (C, 5 + nc), in fp32 whatever autocast gave.
        rows = output.reshape(-1, width).index_select(0, index).float()
        pred = rows[:, :4].t().contiguous()
        pred_wh = (pred[2:4].sigmoid() * 2) ** 2 * anchor_wh
        pred_box = torch.cat((pred[:2].sigmoid() * 2 - 0.5, pred_wh))
        # CIoU from ops, not torchvision.ops.complete_box_iou_loss: torchvision's agrees with yolov5's to fp32
        # rounding (tests/training/test_loss.py) but fills the intersection by boolean-mask indexing (aten.nonzero: a
        # host sync and a data-dependent shape), which the fixed-shape mode must not have.
        unit = target_box.new_tensor(UNIT_BOX).view(4, 1)
        ciou = ciou_paired(torch.where(mask, pred_box, unit).t(), torch.where(mask, target_box, unit).t())
        count = mask.sum().clamp(min=1)
        box = torch.where(mask, 1 - ciou, 0).sum() / count
        obj_target = last_write(index, ciou.detach().clamp(min=0), mask, batch * num_anchors * ny * nx)
        obj = self._bce(output[..., 4].float(), obj_target.view(batch, num_anchors, ny, nx),
                        self.loss_settings.obj_pos_weight).mean()
        if self.num_classes == 1:  # yolov5 has no class loss for one class
            return box, obj, torch.zeros_like(obj)
        return box, obj, self._class_loss(rows[:, 5:], classes, mask, count)

    def _candidates(self, targets: Tensor, anchors: Tensor, ny: int, nx: int) -> tuple[Tensor, Tensor, Tensor]:
        """Candidates of one level in the reference's write order (G=5 offset groups, na, B, M): match mask, flat
        cell index into (B, na, ny, nx), and target box (4, G, 1, B, M) xywh in grid units from the cell."""
        batch = targets.shape[0]
        num_anchors = anchors.shape[0]
        size = targets.new_tensor([nx, ny])
        centre, box_size = targets[..., 1:3] * size, targets[..., 3:5] * size  # (B, M, 2) grid units
        ratio = box_size[:, :, None] / anchors  # (B, M, na, 2)
        matched = (torch.maximum(ratio, 1 / ratio).amax(-1) < self.loss_settings.anchor_threshold)
        matched = matched & (targets[..., 0] >= 0)[..., None]
        # Neighbours: x-1 when frac(gx) < 0.5 and gx > 1, x+1 when frac(nx - gx) < 0.5 and nx - gx > 1; same in y.
        beyond = size - centre
        lower = (centre % 1 < 0.5) & (centre > 1)
        upper = (beyond % 1 < 0.5) & (beyond > 1)
        groups = torch.stack((torch.ones_like(lower[..., 0]), lower[..., 0], lower[..., 1],
                              upper[..., 0], upper[..., 1]))  # (G, B, M)
        mask = groups[:, None] & matched.permute(2, 0, 1)[None]
        cell = (centre - targets.new_tensor(CELL_OFFSETS)[:, None, None]).long()  # (G, B, M, 2)
        cell_x, cell_y = cell[..., 0].clamp(0, nx - 1), cell[..., 1].clamp(0, ny - 1)
        image = torch.arange(batch, device=targets.device)[:, None]
        anchor = torch.arange(num_anchors, device=targets.device)[:, None, None]
        index = ((image * num_anchors + anchor) * ny + cell_y[:, None]) * nx + cell_x[:, None]
        offset = torch.stack((centre[..., 0] - cell_x, centre[..., 1] - cell_y))  # (2, G, B, M), in (-0.5, 1.5)
        target_box = torch.cat((offset, box_size.permute(2, 0, 1)[:, None].expand_as(offset)))[:, :, None]
        return mask, index, target_box

    def _class_loss(self, logits: Tensor, classes: Tensor, mask: Tensor, count: Tensor) -> Tensor:
        """Class BCE of (C, nc) candidate logits against smoothed one-hot targets (classes (C,)), mean over matches x
        classes."""
        negative = 0.5 * self.loss_settings.label_smoothing  # yolov5's smoothed targets: 1 - eps/2 and eps/2
        positive, pos_weight = 1 - negative, self.loss_settings.cls_pos_weight
        # Every class is scored against the negative target and the true class then corrected to the positive one,
        # so no (C, nc) target is built and the mask applies to one sum per candidate.
        true_logit = logits.gather(1, classes.long().clamp(min=0)[:, None])[:, 0]
        per_candidate = (self._bce(logits, negative, pos_weight).sum(1) + self._bce(true_logit, positive, pos_weight)
                         - self._bce(true_logit, negative, pos_weight))
        return torch.where(mask, per_candidate, 0).sum() / (count * self.num_classes)

    def _bce(self, logits: Tensor, target: Tensor | float, pos_weight: float) -> Tensor:
        """Element-wise BCE with logits and pos_weight (torch's BCEWithLogitsLoss formula), in focal form (alpha
        0.25, docs/yolov5.md, "Loss") when focal_gamma > 0. torchvision's sigmoid_focal_loss has no pos_weight."""
        loss = (1 - target) * logits - (1 + (pos_weight - 1) * target) * F.logsigmoid(logits)
        gamma = self.loss_settings.focal_gamma
        if gamma > 0:
            prob = logits.sigmoid()
            agreement = target * prob + (1 - target) * (1 - prob)
            alpha = target * FOCAL_ALPHA + (1 - target) * (1 - FOCAL_ALPHA)
            loss = loss * alpha * (1 - agreement) ** gamma
        return loss
