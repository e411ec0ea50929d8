"""The YOLOv5 Detect head: per-level 1x1 convs, anchor decode and bias initialisation (YOLOV5-FACTS.md)."""

from __future__ import annotations

import math

import torch
from torch import nn


class Detect(nn.Module):
    """Predicts na*(nc+5) values per cell on each level; decodes them to pixel boxes in eval mode."""

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
        """Record the level strides and convert the pixel anchors to grid units."""
        self.stride = strides.to(self.anchors)
        self.anchors /= self.stride.view(-1, 1, 1)

    @torch.no_grad()
    def initialize_biases(self) -> None:
        """Prior-informed biases: about 8 objects per 640 image and a 0.6 class prior (YOLOV5-FACTS.md)."""
        for conv, stride in zip(self.m, self.stride.tolist()):
            bias = conv.bias.view(self.na, self.no)
            bias[:, 4] += math.log(8 / (640 / stride) ** 2)
            bias[:, 5:] += math.log(0.6 / (self.nc - 0.99))

    def forward(self, features: list[torch.Tensor]):
        """Train: list of raw (B, na, ny, nx, no). Eval: ((B, N, no) decoded [cx, cy, w, h px, obj, cls...], raw)."""
        raw = []
        for level, (conv, x) in enumerate(zip(self.m, features)):
            batch, _, ny, nx = x.shape
            raw.append(conv(x).view(batch, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous())
        if self.training:
            return raw
        return torch.cat([self.decode(r, level) for level, r in enumerate(raw)], dim=1), raw

    def decode(self, raw: torch.Tensor, level: int) -> torch.Tensor:
        """(B, na, ny, nx, no) raw -> (B, na*ny*nx, no): xy = (2s - 0.5 + grid) * stride, wh = (2s)^2 * anchor."""
        batch, _, ny, nx, _ = raw.shape
        grid = self._grid(ny, nx, raw)
        anchor_px = (self.anchors[level] * self.stride[level]).view(1, self.na, 1, 1, 2).to(raw.dtype)
        s = raw.sigmoid()
        xy = (s[..., :2] * 2 - 0.5 + grid) * self.stride[level]
        wh = (s[..., 2:4] * 2) ** 2 * anchor_px
        return torch.cat((xy, wh, s[..., 4:]), dim=-1).view(batch, -1, self.no)

    def _grid(self, ny: int, nx: int, like: torch.Tensor) -> torch.Tensor:
        """Cell offsets (1, 1, ny, nx, 2) as (x, y), cached per shape, device and dtype."""
        key = (ny, nx, like.device, like.dtype)
        if key not in self._grids:
            ys, xs = torch.meshgrid(torch.arange(ny, device=like.device), torch.arange(nx, device=like.device),
                                    indexing="ij")
            self._grids[key] = torch.stack((xs, ys), dim=-1).view(1, 1, ny, nx, 2).to(like.dtype)
        return self._grids[key]
