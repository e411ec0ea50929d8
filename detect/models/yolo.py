"""Build a YOLOv5 detection model from a ModelSpec; parameters are named model.<layer index>.<...>. A stored model
(a weights file's yaml, names and tensors) is built here too, its tensors checked to fit and to be finite."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch
from torch import nn

from detect.errors import UserError
from detect.models.head import Detect, check_classes
from detect.models.layers import (
    ACTIVATIONS,
    C3,
    C3TR,
    SPP,
    SPPF,
    Bottleneck,
    BottleneckCSP,
    C3Ghost,
    Concat,
    Conv,
    Focus,
    GhostConv,
)
from detect.models.spec import BottleneckArgs, LayerSpec, ModelSpec, load_model_spec
from detect.models.stored import StoredModel, TrainedWith

LOGGER = logging.getLogger(__name__)


def scale_channels(channels: int, width_multiple: float) -> int:
    """Channels after the width multiple, rounded up to a multiple of 8 (docs/yolov5.md, "Architecture")."""
    return math.ceil(channels * width_multiple / 8) * 8


def scale_repeats(repeats: int, depth_multiple: float) -> int:
    """Block repeats after the depth multiple, at least one; a single block stays single (yolov5's parse_model)."""
    return max(round(repeats * depth_multiple), 1) if repeats > 1 else repeats


def placeholder_anchors(per_level: int, levels: int) -> list[list[float]]:
    """`anchors: N` in a yaml: yolov5's stand-in values (0, 1, 2, ... pixels) until AutoAnchor computes real ones."""
    return [[float(value) for value in range(2 * per_level)] for _ in range(levels)]


def _build_layer(layer: LayerSpec, in_channels: list[int], spec: ModelSpec, num_classes: int) -> tuple[nn.Module, int]:
    """One nn.Module and its output channel count."""
    args, first, module = layer.args, in_channels[0], layer.module
    if module in SHAPE_ONLY:
        return SHAPE_ONLY[module](args), first
    if module == "Concat":
        return Concat(), sum(in_channels)
    if module == "Detect":
        anchors = spec.anchors
        if isinstance(anchors, int):
            anchors = placeholder_anchors(anchors, len(in_channels))
        check_classes(num_classes, len(anchors[0]) // 2, in_channels)
        return Detect(num_classes, anchors, in_channels), 0
    out = scale_channels(args.channels, spec.width_multiple)
    return BLOCKS[module](args, first, out, spec.depth_multiple), out


def _bottlenecks(args: BottleneckArgs, first: int, out: int, depth_multiple: float) -> nn.Module:
    """yolov3's Bottleneck rows: one block, or n > 1 chained in an nn.Sequential (named model.<i>.<j>.cv1...)."""
    repeats = scale_repeats(args.repeat, depth_multiple)
    blocks = [Bottleneck(first if j == 0 else out, out, args.shortcut) for j in range(repeats)]
    return blocks[0] if repeats == 1 else nn.Sequential(*blocks)


# Layers that keep their input's channels and only change its shape.
SHAPE_ONLY = {
    "Upsample": lambda args: nn.Upsample(scale_factor=args.scale, mode="nearest"),
    "MaxPool2d": lambda args: nn.MaxPool2d(args.kernel, args.stride, args.padding),
    "ZeroPad2d": lambda args: nn.ZeroPad2d(tuple(args.padding)),
}
# Blocks with `channels` (after the width multiple: `out`), from their arguments, input channels and depth multiple.
BLOCKS = {
    "Conv": lambda args, first, out, depth: Conv(first, out, args.kernel, args.stride, args.padding),
    "Focus": lambda args, first, out, depth: Focus(first, out, args.kernel, args.stride, args.padding),
    "GhostConv": lambda args, first, out, depth: GhostConv(first, out, args.kernel, args.stride),
    "C3": lambda args, first, out, depth: C3(first, out, scale_repeats(args.repeat, depth), args.shortcut),
    "C3Ghost": lambda args, first, out, depth: C3Ghost(first, out, scale_repeats(args.repeat, depth), args.shortcut),
    "C3TR": lambda args, first, out, depth: C3TR(first, out, scale_repeats(args.repeat, depth), args.shortcut),
    "BottleneckCSP": lambda args, first, out, depth: BottleneckCSP(first, out, scale_repeats(args.repeat, depth),
                                                                   args.shortcut, args.activation),
    "Bottleneck": _bottlenecks,
    "SPP": lambda args, first, out, depth: SPP(first, out, tuple(args.kernels)),
    "SPPF": lambda args, first, out, depth: SPPF(first, out, args.kernel),
}


def set_activation(model: nn.Module, name: str) -> None:
    """Every Conv's activation becomes `name` (layers.ACTIVATIONS), as yolov5's yaml key `activation` does; Convs
    built without one keep none."""
    if name == "silu":
        return
    for module in model.modules():
        if isinstance(module, Conv) and isinstance(module.act, nn.SiLU):
            module.act = ACTIVATIONS[name]()


class DetectionModel(nn.Module):
    """A YOLOv5 network: layers run in order, each reading the outputs named by its `inputs`."""

    def __init__(self, spec: ModelSpec, num_classes: int | None = None, names: list[str] | None = None):
        super().__init__()
        self.nc = num_classes or spec.num_classes
        self.names = names or [str(i) for i in range(self.nc)]
        self.spec = spec
        self.trained = TrainedWith()  # a model read from a file: what the file records (build_stored)
        channels, modules, self.inputs = [3], [], []
        for index, layer in enumerate(spec.layers):
            absolute = [index + i if i < 0 else i for i in layer.inputs]
            module, out = _build_layer(layer, [channels[i + 1] for i in absolute], spec, self.nc)
            modules.append(module)
            self.inputs.append(absolute)
            channels.append(out)
        self.model = nn.Sequential(*modules)
        set_activation(self.model, spec.activation)
        self._kept = {i for ins in self.inputs for i in ins if i >= 0}
        detect = self.detect
        # Strides from the maps the head reads for a small image: the head's own outputs are nc + 5 channels wide
        # (1.2 GB at 100,000 classes) and add nothing to the shapes.
        with torch.no_grad():
            maps = self._head_inputs(torch.zeros(1, 3, 256, 256))
        detect.set_strides(torch.tensor([256 / level.shape[2] for level in maps], device="cpu"))
        detect.initialize_biases()

    @property
    def detect(self) -> Detect:
        return self.model[-1]

    @property
    def stride(self) -> torch.Tensor:
        return self.detect.stride

    @property
    def max_stride(self) -> int:
        """What image sides must be multiples of: the largest level stride, at least 32 (yolov5's rule: a head on
        P3-P4 only, as yolov5-p34's, still sits on a stride-32 backbone)."""
        return max(*self.detect.level_strides, 32)

    def forward(self, images: torch.Tensor,
                with_head_inputs: bool = False) -> list[torch.Tensor] | tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Raw head outputs, one (B, na, ny, nx, 5+nc) tensor per level, in train and eval mode alike (the loss's input);
        `with_head_inputs`: (those outputs, the (B, C, ny, nx) maps the head read), what distillation compares (asked
        through forward, so that DistributedDataParallel sees the whole graph).

        images: (B, 3, H, W) float in [0, 1], H and W multiples of the largest stride.
        """
        maps = self._head_inputs(images)
        outputs = self.detect(maps)
        return (outputs, maps) if with_head_inputs else outputs

    @property
    def head_channels(self) -> tuple[int, ...]:
        """The channels of each map the Detect head reads (P3, P4, P5 for the standard yamls)."""
        return tuple(conv.in_channels for conv in self.detect.m)

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """Decoded predictions (B, N, 5+nc) [cx, cy, w, h (input pixels), obj, class scores...], before NMS.

        The inference contract that validation, predict and every export share; call it in eval mode.
        """
        detect = self.detect
        return detect.decode(detect.levels(self._head_inputs(images)))

    def _head_inputs(self, images: torch.Tensor) -> list[torch.Tensor]:
        """Run every layer but the last, the Detect head (the spec guarantees it); return the maps the head reads."""
        x, saved, head = images, {}, len(self.model) - 1
        for index, (module, inputs) in enumerate(zip(self.model, self.inputs)):
            if len(inputs) > 1 or inputs[0] != index - 1:
                x = [saved[i] if i >= 0 else images for i in inputs]
                x = x if isinstance(module, (Concat, Detect)) else x[0]
            if index == head:
                break
            x = module(x)
            if index in self._kept:
                saved[index] = x
        return x

    def fuse(self) -> DetectionModel:
        """Fold every BatchNorm into its convolution, for inference."""
        for module in self.modules():
            if isinstance(module, Conv):
                module.fuse()
        return self


class PredictModule(nn.Module):
    """A model whose forward is its `predict` (decode in the graph, NMS outside): what the exports trace."""

    def __init__(self, model: DetectionModel):
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) float [0, 1] -> (B, N, 5+nc) decoded, as DetectionModel.predict."""
        return self.model.predict(images)


def build_model(cfg: str | Path | ModelSpec, num_classes: int | None = None,
                names: list[str] | None = None) -> DetectionModel:
    """A model from a yaml name (configs/models/), a path or a parsed spec; `num_classes` overrides nc."""
    spec = cfg if isinstance(cfg, ModelSpec) else load_model_spec(cfg)
    return DetectionModel(spec, num_classes, names)


def check_fit(model: DetectionModel, state_dict: dict, source: str | Path) -> None:
    """Weights that do not fit `model` as one UserError line (not load_state_dict's many): the first tensor whose
    shape differs, with both shapes, or that the model or the file lacks."""
    target = model.state_dict()
    described = f"the model its yaml and {len(model.names)} class names describe"
    for name, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor):
            raise UserError(f"{source}: {name} in its state dict is a {type(tensor).__name__}, not a tensor")
        if name not in target:
            raise UserError(f"{source}: the weights do not fit {described}: the model has no tensor {name}")
        if tuple(tensor.shape) != tuple(target[name].shape):
            raise UserError(f"{source}: the weights do not fit {described}: {name} is {tuple(tensor.shape)} in the "
                            f"file, {tuple(target[name].shape)} in the model")
    missing = [name for name in target if name not in state_dict]
    if missing:
        raise UserError(f"{source}: the weights do not fit {described}: {len(missing)} of its tensors are not in the "
                        f"file, the first {missing[0]}")


def check_finite(state_dict: dict, source: str | Path, refuse: bool = True) -> None:
    """A UserError (or, not `refuse`, a warning) naming how many tensors of `state_dict` hold NaN or inf: such
    weights predict nothing."""
    bad = [name for name, tensor in state_dict.items()
           if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]
    if not bad:
        return
    message = (f"{source}: {len(bad)} of {len(state_dict)} tensors hold NaN or inf (the first {bad[0]}): weights of a "
               "diverged run, which predict nothing")
    if refuse:
        raise UserError(message + "; use an earlier checkpoint")
    LOGGER.warning("%s", message)


def build_stored(spec: ModelSpec, stored: StoredModel, refuse_nonfinite: bool = True) -> DetectionModel:
    """The model `spec` (parsed from `stored.mapping`) describes, holding the stored tensors; tensors that do not fit
    it, or (refuse_nonfinite) hold NaN or inf, are a UserError naming the file (check_fit, check_finite). Its first
    weights, overwritten at once, draw on a copy of the global RNG: reading weights never moves what a seeded run
    draws next (a new run's own layers, built after it)."""
    with torch.random.fork_rng(devices=[]):
        model = DetectionModel(spec, stored.num_classes, stored.names)
    check_fit(model, stored.state_dict, stored.tensors_source)
    model.load_state_dict(stored.state_dict)
    model.trained = stored.trained
    check_finite(stored.state_dict, stored.source, refuse_nonfinite)
    return model
