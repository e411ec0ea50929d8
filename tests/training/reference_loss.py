"""A plain, slow YOLOv5 loss for tests, written from docs/yolov5.md ("Loss") the way yolov5 structures it:
flat targets (T, 6) [image, cls, cx, cy, w, h], boolean indexing, one level at a time, Python loops where they
make the meaning obvious."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from detect.training.loss import LossSettings


def flat_targets(padded: Tensor) -> Tensor:
    """(B, M, 5) padded targets -> (T, 6) [image, cls, cx, cy, w, h], image by image, rows in order."""
    rows = [torch.cat((torch.full((1,), float(image)), row)) for image in range(padded.shape[0])
            for row in padded[image] if row[0] >= 0]
    return torch.stack(rows) if rows else torch.zeros((0, 6))


def reference_ciou(box1: Tensor, box2: Tensor, eps: float = 1e-7) -> Tensor:
    """CIoU of (n, 4) xywh boxes paired one to one, through corner coordinates as yolov5's loss computes it."""
    x1, y1, w1, h1 = box1.unbind(-1)
    x2, y2, w2, h2 = box2.unbind(-1)
    left1, right1, top1, bottom1 = x1 - w1 / 2, x1 + w1 / 2, y1 - h1 / 2, y1 + h1 / 2
    left2, right2, top2, bottom2 = x2 - w2 / 2, x2 + w2 / 2, y2 - h2 / 2, y2 + h2 / 2
    inter = ((torch.min(right1, right2) - torch.max(left1, left2)).clamp(0)
             * (torch.min(bottom1, bottom2) - torch.max(top1, top2)).clamp(0))
    iou = inter / (w1 * h1 + w2 * h2 - inter + eps)
    enclosing_sq = ((torch.max(right1, right2) - torch.min(left1, left2)) ** 2
                    + (torch.max(bottom1, bottom2) - torch.min(top1, top2)) ** 2 + eps)
    centres_sq = ((left2 + right2 - left1 - right1) ** 2 + (top2 + bottom2 - top1 - bottom1) ** 2) / 4
    v = (4 / math.pi**2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)) ** 2
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (centres_sq / enclosing_sq + v * alpha)


class ReferenceLoss:
    """The YOLOv5 loss over flat targets; same settings and anchors (nl, na, 2, grid units) as DetectionLoss."""

    def __init__(self, settings: LossSettings, anchors: Tensor, num_classes: int):
        self.settings, self.anchors, self.num_classes = settings, anchors, num_classes
        nl = anchors.shape[0]
        self.balance = [4.0, 1.0, 0.4] if nl == 3 else [4.0, 1.0, 0.25, 0.06, 0.02][:nl]

    def bce(self, logits: Tensor, target: Tensor, pos_weight: float) -> Tensor:
        """Mean BCE with pos_weight, focal (alpha 0.25) when gamma > 0."""
        loss = F.binary_cross_entropy_with_logits(logits, target, pos_weight=torch.tensor([pos_weight]),
                                                  reduction="none")
        if self.settings.focal_gamma > 0:
            p = torch.sigmoid(logits)
            p_t = target * p + (1 - target) * (1 - p)
            alpha_t = target * 0.25 + (1 - target) * 0.75
            loss = loss * alpha_t * (1 - p_t) ** self.settings.focal_gamma
        return loss.mean()

    def build_targets(self, raw: list[Tensor], targets: Tensor) -> list[tuple[Tensor, ...]]:
        """Per level: (image, anchor, gy, gx, cls, tbox (n, 4) from the cell, anchor wh) of every match, in order."""
        na, nt = self.anchors.shape[1], targets.shape[0]
        # (na, nt, 7): each target once per anchor, anchor index appended: order is anchor, then target.
        per_anchor = torch.cat((targets.repeat(na, 1, 1), torch.arange(na).float().view(na, 1, 1).repeat(1, nt, 1)), 2)
        offsets = torch.tensor([[0.0, 0.0], [1, 0], [0, 1], [-1, 0], [0, -1]]) * 0.5  # own, x-1, y-1, x+1, y+1
        levels = []
        for i, p in enumerate(raw):
            ny, nx = p.shape[2], p.shape[3]
            t = per_anchor * torch.tensor([1, 1, nx, ny, nx, ny, 1.0])
            r = t[..., 4:6] / self.anchors[i][:, None]
            t = t[torch.max(r, 1 / r).max(2)[0] < self.settings.anchor_threshold]  # (k, 7)
            gxy = t[:, 2:4]
            gxi = torch.tensor([nx, ny]) - gxy
            x_low, y_low = ((gxy % 1 < 0.5) & (gxy > 1)).T
            x_high, y_high = ((gxi % 1 < 0.5) & (gxi > 1)).T
            take = torch.stack((torch.ones_like(x_low), x_low, y_low, x_high, y_high))  # (5, k)
            t = t.repeat((5, 1, 1))[take]  # order: offset group, then anchor, then target
            offset = (torch.zeros_like(gxy)[None] + offsets[:, None])[take]
            gij = (t[:, 2:4] - offset).long()
            gij[:, 0].clamp_(0, nx - 1)
            gij[:, 1].clamp_(0, ny - 1)
            a = t[:, 6].long()
            tbox = torch.cat((t[:, 2:4] - gij, t[:, 4:6]), 1)
            levels.append((t[:, 0].long(), a, gij[:, 1], gij[:, 0], t[:, 1].long(), tbox, self.anchors[i][a]))
        return levels

    def __call__(self, raw: list[Tensor], targets: Tensor) -> tuple[Tensor, Tensor]:
        """(total, [box, obj, cls]) exactly as DetectionLoss defines them, from flat targets."""
        box, obj, cls = torch.zeros(1), torch.zeros(1), torch.zeros(1)
        smooth = self.settings.label_smoothing
        for i, (p, (b, a, gj, gi, c, tbox, anchor)) in enumerate(zip(raw, self.build_targets(raw, targets))):
            p = p.float()
            tobj = torch.zeros(p.shape[:4])
            n = b.shape[0]
            if n:
                hit = p[b, a, gj, gi]
                pxy = hit[:, :2].sigmoid() * 2 - 0.5
                pwh = (hit[:, 2:4].sigmoid() * 2) ** 2 * anchor
                iou = reference_ciou(torch.cat((pxy, pwh), 1), tbox)
                box += (1.0 - iou).mean()
                # Several matches on one (image, anchor, cell): written one after another, the last one stays.
                for k in range(n):
                    tobj[b[k], a[k], gj[k], gi[k]] = iou[k].detach().clamp(0)
                if self.num_classes > 1:
                    t = torch.full_like(hit[:, 5:], smooth / 2)
                    t[range(n), c] = 1.0 - smooth / 2
                    cls += self.bce(hit[:, 5:], t, self.settings.cls_pos_weight)
            obj += self.bce(p[..., 4], tobj, self.settings.obj_pos_weight) * self.balance[i]
        box, obj, cls = box * self.settings.box_gain, obj * self.settings.obj_gain, cls * self.settings.cls_gain
        return ((box + obj + cls) * raw[0].shape[0])[0], torch.cat((box, obj, cls)).detach()
