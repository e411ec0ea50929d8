"""YOLOv5 building blocks (docs/yolov5.md, "Architecture"); attribute names match ultralytics checkpoints.

Focus, SPP and BottleneckCSP are the v5.0-era blocks (and hub models'): they are here so that older yolov5
checkpoints load unchanged, with the same parameters and outputs as yolov5's own definitions. GhostConv, C3Ghost
and C3TR are the blocks of yolov5's hub yamls (yolov5s-ghost, yolov5s-transformer).
"""

from __future__ import annotations

import torch
from torch import nn

# A model's Conv activation by name (a model yaml's `activation`; yolov5 writes e.g. nn.LeakyReLU(0.1)).
ACTIVATIONS = {"silu": nn.SiLU, "leaky_relu": lambda: nn.LeakyReLU(0.1), "relu": nn.ReLU, "relu6": nn.ReLU6,
               "hardswish": nn.Hardswish, "mish": nn.Mish, "gelu": nn.GELU}


class Conv(nn.Module):
    """Conv2d (no bias) + BatchNorm2d + SiLU (or none: `activation` False); BatchNorm can be folded in with `fuse`."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int = 1, stride: int = 1, padding: int | None = None,
                 groups: int = 1, activation: bool = True):
        super().__init__()
        padding = kernel // 2 if padding is None else padding
        self.conv = nn.Conv2d(in_channels, out_channels, kernel, stride, padding, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(out_channels, eps=1e-3, momentum=0.03)
        # A model of another activation swaps it in after building (yolo.py): only where this is SiLU.
        self.act = nn.SiLU() if activation else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))

    @torch.no_grad()
    def fuse(self) -> None:
        """Fold the BatchNorm into the convolution's weight and bias (inference only)."""
        if isinstance(self.bn, nn.Identity):
            return
        bn = self.bn
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        fused = nn.Conv2d(self.conv.in_channels, self.conv.out_channels, self.conv.kernel_size,
                          self.conv.stride, self.conv.padding, groups=self.conv.groups, bias=True)
        fused = fused.to(self.conv.weight.device, self.conv.weight.dtype)
        fused.weight.copy_(self.conv.weight * scale.view(-1, 1, 1, 1))
        fused.bias.copy_(bn.bias - bn.running_mean * scale)
        self.conv, self.bn = fused, nn.Identity()


class Bottleneck(nn.Module):
    """1x1 conv to hidden channels, 3x3 conv back, residual add when shapes allow."""

    def __init__(self, in_channels: int, out_channels: int, shortcut: bool = True, expansion: float = 0.5):
        super().__init__()
        hidden = int(out_channels * expansion)
        self.cv1 = Conv(in_channels, hidden, 1)
        self.cv2 = Conv(hidden, out_channels, 3)
        self.add = shortcut and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    """CSP block: two 1x1 branches, one through `repeats` bottlenecks, concatenated and mixed."""

    def __init__(self, in_channels: int, out_channels: int, repeats: int = 1, shortcut: bool = True):
        super().__init__()
        hidden = out_channels // 2
        self.cv1 = Conv(in_channels, hidden, 1)
        self.cv2 = Conv(in_channels, hidden, 1)
        self.cv3 = Conv(2 * hidden, out_channels, 1)
        self.m = self.inner(hidden, repeats, shortcut)

    def inner(self, channels: int, repeats: int, shortcut: bool) -> nn.Module:
        """The blocks on the first branch (C3Ghost and C3TR put others here)."""
        return nn.Sequential(*(Bottleneck(channels, channels, shortcut, expansion=1.0) for _ in range(repeats)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), dim=1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained max-pools concatenated with their input."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int = 5):
        super().__init__()
        hidden = in_channels // 2
        self.cv1 = Conv(in_channels, hidden, 1)
        self.cv2 = Conv(hidden * 4, out_channels, 1)
        self.m = nn.MaxPool2d(kernel, stride=1, padding=kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), dim=1))


class Focus(nn.Module):
    """The v5.0 stem: space-to-depth (each 2x2 patch's four pixels become channels), then a Conv."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int = 1, stride: int = 1, padding: int | None = None):
        super().__init__()
        self.conv = Conv(in_channels * 4, out_channels, kernel, stride, padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # yolov5's order: even rows/even cols, odd rows/even cols, even rows/odd cols, odd rows/odd cols.
        patches = (x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2])
        return self.conv(torch.cat(patches, dim=1))


class SPP(nn.Module):
    """Spatial pyramid pooling (v5.0): parallel max-pools of several sizes concatenated with their input."""

    def __init__(self, in_channels: int, out_channels: int, kernels: tuple[int, ...] = (5, 9, 13)):
        super().__init__()
        hidden = in_channels // 2
        self.cv1 = Conv(in_channels, hidden, 1)
        self.cv2 = Conv(hidden * (len(kernels) + 1), out_channels, 1)
        self.m = nn.ModuleList(nn.MaxPool2d(kernel, stride=1, padding=kernel // 2) for kernel in kernels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        return self.cv2(torch.cat([x, *(pool(x) for pool in self.m)], dim=1))


class BottleneckCSP(nn.Module):
    """The original CSP block: bottlenecks and a plain 1x1 conv on two branches, BatchNorm over both, mixed."""

    def __init__(self, in_channels: int, out_channels: int, repeats: int = 1, shortcut: bool = True,
                 activation: str = "silu"):
        # The activation after its BatchNorm (not a Conv's): LeakyReLU(0.1) until yolov5 v6.0, SiLU from v6.1 on.
        super().__init__()
        hidden = out_channels // 2
        self.cv1 = Conv(in_channels, hidden, 1)
        self.cv2 = nn.Conv2d(in_channels, hidden, 1, bias=False)
        self.cv3 = nn.Conv2d(hidden, hidden, 1, bias=False)
        self.cv4 = Conv(2 * hidden, out_channels, 1)
        self.bn = nn.BatchNorm2d(2 * hidden, eps=1e-3, momentum=0.03)
        self.act = ACTIVATIONS[activation]()
        self.m = nn.Sequential(*(Bottleneck(hidden, hidden, shortcut, expansion=1.0) for _ in range(repeats)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat((self.cv3(self.m(self.cv1(x))), self.cv2(x)), dim=1)
        return self.cv4(self.act(self.bn(y)))


class Concat(nn.Module):
    """Concatenate a list of feature maps along channels."""

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(xs, dim=1)


class GhostConv(nn.Module):
    """Half the output channels from a Conv, the other half from a cheap 5x5 depthwise Conv of those (GhostNet)."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int = 1, stride: int = 1,
                 activation: bool = True):
        super().__init__()
        hidden = out_channels // 2
        self.cv1 = Conv(in_channels, hidden, kernel, stride, activation=activation)
        self.cv2 = Conv(hidden, hidden, 5, 1, groups=hidden, activation=activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv1(x)
        return torch.cat((y, self.cv2(y)), dim=1)


class GhostBottleneck(nn.Module):
    """Two GhostConvs (the second without activation) plus the input: the stride-1 form, the one C3Ghost uses."""

    def __init__(self, channels: int):
        super().__init__()
        # Index 1 is yolov5's depthwise conv of the stride-2 form; the Identity keeps checkpoint names conv.2.*.
        self.conv = nn.Sequential(GhostConv(channels, channels // 2, 1, 1), nn.Identity(),
                                  GhostConv(channels // 2, channels, 1, 1, activation=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + x


class C3Ghost(C3):
    """C3 with ghost bottlenecks (they always add their input: `shortcut` does not apply)."""

    def inner(self, channels: int, repeats: int, shortcut: bool) -> nn.Module:
        return nn.Sequential(*(GhostBottleneck(channels) for _ in range(repeats)))


class TransformerLayer(nn.Module):
    """Multi-head self-attention and a two-layer linear map, each with a residual; no LayerNorm (as yolov5)."""

    def __init__(self, channels: int, heads: int):
        super().__init__()
        self.q = nn.Linear(channels, channels, bias=False)
        self.k = nn.Linear(channels, channels, bias=False)
        self.v = nn.Linear(channels, channels, bias=False)
        self.ma = nn.MultiheadAttention(embed_dim=channels, num_heads=heads)
        self.fc1 = nn.Linear(channels, channels, bias=False)
        self.fc2 = nn.Linear(channels, channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (cells, B, C) -> the same shape."""
        x = self.ma(self.q(x), self.k(x), self.v(x))[0] + x
        return self.fc2(self.fc1(x)) + x


class TransformerBlock(nn.Module):
    """A feature map's cells as a sequence, plus a learned linear position term, through `layers` transformer layers."""

    def __init__(self, channels: int, heads: int, layers: int):
        super().__init__()
        self.linear = nn.Linear(channels, channels)
        self.tr = nn.Sequential(*(TransformerLayer(channels, heads) for _ in range(layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        cells = x.flatten(2).permute(2, 0, 1)  # (H*W, B, C): MultiheadAttention's sequence-first layout
        return self.tr(cells + self.linear(cells)).permute(1, 2, 0).reshape(batch, channels, height, width)


class C3TR(C3):
    """C3 whose first branch is one transformer block of `repeats` layers, 4 heads (yolov5's C3TR)."""

    def inner(self, channels: int, repeats: int, shortcut: bool) -> nn.Module:
        return TransformerBlock(channels, 4, repeats)
