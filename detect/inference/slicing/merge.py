"""How detections meet across the windows of sliced inference: a box cut by a window's inner edge merged into the
box of another window that holds it (before the class-wise NMS that follows)."""

from __future__ import annotations

import torch

# A box cut by a window's inner edge is merged into a box of another window that holds this share of its area (the
# intersection over the smaller box, as SAHI's default merge, GREEDYNMM with IOS 0.5).
SEAM_SHARE = 0.5
SEAM_MARGIN = 2  # pixels: a box this close to a window's inner edge is taken as cut by it
WHOLE = -1  # the window id of the whole image's detections


def merge_seams(rows: torch.Tensor, ids: torch.Tensor, windows: torch.Tensor, height: int,
                width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The detections after each box cut by an inner edge of its window (within SEAM_MARGIN of an edge that is not
    the image's) is merged into a box of the same class from another window that holds SEAM_SHARE of its area (an
    uncut one first, then the best): their union, with the better score. rows (n, 6) best first, ids (n,) their
    window's index in `windows` (n_w, 4) xyxy, or WHOLE; the rows and ids kept, best first."""
    if not len(rows):
        return rows, ids
    own, boxes = windows[ids.clamp(min=0)].to(rows.dtype), rows[:, :4]
    cut = ((own[:, 0] > 0) & (boxes[:, 0] <= own[:, 0] + SEAM_MARGIN)) | \
          ((own[:, 1] > 0) & (boxes[:, 1] <= own[:, 1] + SEAM_MARGIN)) | \
          ((own[:, 2] < width) & (boxes[:, 2] >= own[:, 2] - SEAM_MARGIN)) | \
          ((own[:, 3] < height) & (boxes[:, 3] >= own[:, 3] - SEAM_MARGIN))
    cut &= ids != WHOLE
    merged, kept = rows.clone(), torch.ones(len(rows), dtype=torch.bool)
    for index in torch.nonzero(cut).flatten().flip(0).tolist():  # the weakest first, so a cut box may take it in
        box = merged[index, :4]
        low, high = torch.maximum(merged[:, :2], box[:2]), torch.minimum(merged[:, 2:4], box[2:])
        share = (high - low).clamp(min=0).prod(dim=1) / (box[2:] - box[:2]).prod().clamp(min=1e-9)
        partners = kept & (ids != ids[index]) & (merged[:, 5] == merged[index, 5]) & (share >= SEAM_SHARE)
        partners[index] = False
        if (partners & ~cut).any():
            partners &= ~cut
        if not partners.any():
            continue
        partner = int(torch.nonzero(partners)[0, 0])  # rows are best first
        merged[partner, :2] = torch.minimum(merged[partner, :2], box[:2])
        merged[partner, 2:4] = torch.maximum(merged[partner, 2:4], box[2:])
        merged[partner, 4] = torch.maximum(merged[partner, 4], merged[index, 4])
        kept[index] = False
    merged, ids = merged[kept], ids[kept]
    order = torch.sort(merged[:, 4], descending=True, stable=True).indices
    return merged[order], ids[order]
