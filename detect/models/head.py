"""The YOLOv5 Detect head: per-level 1x1 convs, anchor decode and bias initialisation
(docs/yolov5.md, "Architecture", "Decode")."""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from detect.errors import UserError

# The most classes a model may predict: 3.8x V3Det's 13,204, the largest detection vocabulary in use (LVIS has 1,203).
# Memory grows with the classes: past this bound a small model's head alone holds a hundred million weights and its
# training needs gigabytes more (docs/bad-input.md, "The 14 cases of the third sweep").
MAX_CLASSES = 50_000


def check_classes(num_classes: int, anchors_per_cell: int, in_channels: list[int]) -> None:
    """A UserError, before the head is built, for more than MAX_CLASSES classes: what its weights would take."""
    if num_classes <= MAX_CLASSES:
        return
    weights = sum(in_channels) * anchors_per_cell * (num_classes + 5)
    raise UserError(f"{num_classes:,} classes: more than the {MAX_CLASSES:,} a model may predict (its Detect head "
                    f"alone would hold {weights:,} weights: {4 * weights / 2**30:.1f} GB in float32, "
                    f"{16 * weights / 2**30:.1f} GB to train with their gradients, EMA and momentum)")


class Detect(nn.Module):
    """Predicts na*(nc+5) raw values per cell on each level; `decode` turns them into pixel boxes and scores."""

    def __init__(self, num_classes: int, anchors: list[list[float]], in_channels: list[int]):
        super().__init__()
        self.nc = num_classes
        self.no = num_classes + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        # Anchors are stored in grid units (pixels / stride) once strides are known, as ultralytics does,
        # so that checkpoints map one-to-one; until then they hold pixels.
        self.register_buffer("anchors", torch.tensor(anchors, dtype=torch.float32).view(self.nl, self.na, 2))
        self.register_buffer("stride", torch.ones(self.nl), persistent=False)
        self.m = nn.ModuleList(nn.Conv2d(c, self.na * self.no, 1) for c in in_channels)
        self._grids: dict[tuple, torch.Tensor] = {}

    def set_strides(self, strides: torch.Tensor) -> None:
        """Record the level strides (a CPU tensor) and convert the pixel anchors to grid units."""
        # Also as plain numbers: a model built on the meta device (parameter counts) has no values in its buffers.
        self.level_strides = tuple(int(stride) for stride in strides.tolist())
        self.stride = strides.to(self.anchors)
        self.anchors /= self.stride.view(-1, 1, 1)

    @torch.no_grad()
    def initialize_biases(self) -> None:
        """Prior-informed biases: about 8 objects per 640 image and a 0.6 class prior
        (docs/yolov5.md, "Architecture")."""
        for conv, stride in zip(self.m, self.level_strides):
            bias = conv.bias.view(self.na, self.no)
            bias[:, 4] += math.log(8 / (640 / stride) ** 2)
            bias[:, 5:] += math.log(0.6 / (self.nc - 0.99))

    def levels(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per level, the 1x1 conv's output seen as (B, na, ny, nx, no): a permuted view, not a copy."""
        views = []
        for conv, x in zip(self.m, features):
            batch, _, ny, nx = x.shape
            views.append(conv(x).view(batch, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2))
        return views

    def forward(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        """Raw outputs, a contiguous (B, na, ny, nx, no) tensor per level, in train and eval mode alike."""
        return [level.contiguous() for level in self.levels(features)]

    def decode(self, levels: list[torch.Tensor]) -> torch.Tensor:
        """Raw (B, na, ny, nx, no) per level -> (B, N, no) [cx, cy, w, h (input pixels), obj, class scores...].

        N = na * sum(ny * nx), level by level, anchor-major then row-major within a level (the order yolov5 uses).
        """
        if torch.jit.is_tracing() or torch.is_grad_enabled() or levels[0].device.type != "cpu":
            return torch.cat([self.decode_level(raw, level) for level, raw in enumerate(levels)], dim=1)
        # At inference on the CPU (where it was measured) each level is copied into its rows of one result and
        # decoded there in place, without the per-level and final concatenations of the graph form: two result-sized
        # tensors fewer at the peak (docs/benchmarks.md, "Inference"), the same numbers up to the sigmoid's last bit
        # at the ends of its vectorised runs.
        counts = [math.prod(raw.shape[1:4]) for raw in levels]
        decoded = levels[0].new_empty(levels[0].shape[0], sum(counts), self.no)
        for level, (raw, start) in enumerate(zip(levels, itertools.accumulate([0, *counts]))):
            cells = decoded.narrow(1, start, counts[level]).view(raw.shape)
            cells.copy_(raw).sigmoid_()
            grid, anchor_px = self._cell_terms(raw, level)
            cells[..., :2].mul_(2).sub_(0.5).add_(grid).mul_(self.stride[level])
            cells[..., 2:4].mul_(2).pow_(2).mul_(anchor_px)
        return decoded

    def decode_level(self, raw: torch.Tensor, level: int) -> torch.Tensor:
        """(B, na, ny, nx, no) raw -> (B, na*ny*nx, no): xy = (2s - 0.5 + grid) * stride, wh = (2s)^2 * anchor
        (docs/yolov5.md, "Decode"), as the graph that exports trace computes it."""
        grid, anchor_px = self._cell_terms(raw, level)
        # One sigmoid pass over the (possibly permuted) view and one cat that writes the contiguous result: the
        # scores are never copied on their own.
        xy, wh, scores = raw.sigmoid().split((2, 2, self.no - 4), dim=-1)
        xy = (xy * 2 - 0.5 + grid) * self.stride[level]
        wh = (wh * 2) ** 2 * anchor_px
        return torch.cat((xy, wh, scores), dim=-1).view(raw.shape[0], -1, self.no)

    def _cell_terms(self, raw: torch.Tensor, level: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The level's cell offsets (1, 1, ny, nx, 2) and its anchors in pixels (1, na, 1, 1, 2)."""
        anchor_px = (self.anchors[level] * self.stride[level]).view(1, self.na, 1, 1, 2).to(raw.dtype)
        return self._grid(raw.shape[2], raw.shape[3], raw), anchor_px

    def _grid(self, ny: int, nx: int, like: torch.Tensor) -> torch.Tensor:
        """Cell offsets (1, 1, ny, nx, 2) as (x, y), cached per shape, device and dtype (never while tracing)."""
        key = (ny, nx, like.device, like.dtype)
        # A traced export computes the grid in its graph, so that a dynamic height and width stay dynamic.
        if key in self._grids and not torch.jit.is_tracing():
            return self._grids[key]
        ys, xs = torch.meshgrid(torch.arange(ny, device=like.device), torch.arange(nx, device=like.device),
                                indexing="ij")
        grid = torch.stack((xs, ys), dim=-1).view(1, 1, ny, nx, 2).to(like.dtype)
        if not torch.jit.is_tracing():
            self._grids[key] = grid
        return grid
