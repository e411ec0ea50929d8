"""The model yaml schema: scale multiples, anchors and a list of named layers (configs/models/*.yaml).

A yaml in ultralytics/yolov5's own format (rows [from, number, module, args]) is translated first (yolov5_yaml.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from detect.config import from_mapping, read_yaml, resolve_config
from detect.errors import ConfigError, short_repr
from detect.models.layers import ACTIVATIONS
from detect.models.yolov5_yaml import is_yolov5_format, mapping_from_yolov5


@dataclasses.dataclass(frozen=True)
class ConvArgs:
    channels: int
    kernel: int = 1
    stride: int = 1
    padding: int | None = None


@dataclasses.dataclass(frozen=True)
class C3Args:
    channels: int
    repeat: int = 1
    shortcut: bool = True


@dataclasses.dataclass(frozen=True)
class SPPFArgs:
    channels: int
    kernel: int = 5


@dataclasses.dataclass(frozen=True)
class SPPArgs:
    channels: int
    kernels: tuple[int, ...] = (5, 9, 13)


@dataclasses.dataclass(frozen=True)
class BottleneckCSPArgs:
    channels: int
    repeat: int = 1
    shortcut: bool = True
    activation: str = "silu"  # or leaky_relu (yolov5 up to v6.0)

    def __post_init__(self) -> None:
        if self.activation not in ("silu", "leaky_relu"):
            raise ValueError(f"key 'activation' must be silu or leaky_relu, got {short_repr(self.activation)}")


@dataclasses.dataclass(frozen=True)
class GhostConvArgs:
    channels: int
    kernel: int = 1
    stride: int = 1


@dataclasses.dataclass(frozen=True)
class BottleneckArgs:
    """A Bottleneck as a layer of its own (yolov3); `repeat` > 1 chains that many."""

    channels: int
    shortcut: bool = True
    repeat: int = 1


@dataclasses.dataclass(frozen=True)
class MaxPool2dArgs:
    kernel: int
    stride: int | None = None  # None: the kernel size (torch's default)
    padding: int = 0


@dataclasses.dataclass(frozen=True)
class ZeroPad2dArgs:
    padding: tuple[int, ...]  # left, right, top, bottom

    def __post_init__(self) -> None:
        if len(self.padding) != 4:
            raise ValueError(f"key 'padding' must be 4 ints (left, right, top, bottom), got {list(self.padding)}")


@dataclasses.dataclass(frozen=True)
class UpsampleArgs:
    scale: int = 2


@dataclasses.dataclass(frozen=True)
class NoArgs:
    """Concat and Detect take only their inputs (`from`)."""


# Focus takes a Conv's arguments; Focus, SPP and BottleneckCSP are the yolov5 v5.0-era blocks; GhostConv, C3Ghost,
# C3TR, Bottleneck, MaxPool2d and ZeroPad2d those of yolov5's hub yamls (ghost, transformer, yolov3).
LAYER_ARGS = {"Conv": ConvArgs, "C3": C3Args, "SPPF": SPPFArgs, "Upsample": UpsampleArgs,
              "Concat": NoArgs, "Detect": NoArgs, "Focus": ConvArgs, "SPP": SPPArgs, "BottleneckCSP": BottleneckCSPArgs,
              "GhostConv": GhostConvArgs, "C3Ghost": C3Args, "C3TR": C3Args, "Bottleneck": BottleneckArgs,
              "MaxPool2d": MaxPool2dArgs, "ZeroPad2d": ZeroPad2dArgs}


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    """One layer: its module name, the earlier layers it reads (-1 = the previous one) and its arguments."""

    module: str
    inputs: tuple[int, ...]
    args: Any


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A whole model: depth/width multiples, anchors in pixels per level (or an int: that many per level, to be
    computed from the labels by AutoAnchor), classes, the layer list and every Conv's activation."""

    depth_multiple: float
    width_multiple: float
    anchors: list[list[float]] | int
    num_classes: int
    layers: tuple[LayerSpec, ...]
    source: str
    mapping: dict  # the yaml mapping it was parsed from (ours), stored in checkpoints to rebuild the model
    activation: str = "silu"


@dataclasses.dataclass(frozen=True)
class _ModelFile:
    depth_multiple: float
    width_multiple: float
    anchors: list[list[float]] | int
    backbone: list[dict]
    head: list[dict]
    nc: int = 80
    activation: str = "silu"  # of every Conv (layers.ACTIVATIONS)


def _parse_layer(entry: Any, where: str) -> LayerSpec:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: each layer must be a mapping, got {short_repr(entry)}")
    entry = dict(entry)
    module = entry.pop("module", None)
    if module not in LAYER_ARGS:
        raise ConfigError(f"{where}: key 'module' must be one of {', '.join(LAYER_ARGS)}, got {short_repr(module)}")
    inputs = entry.pop("from", -1)
    inputs = (inputs,) if isinstance(inputs, int) else inputs
    if not (isinstance(inputs, (list, tuple)) and inputs and all(type(i) is int for i in inputs)):
        raise ConfigError(f"{where}: key 'from' must be an int or a list of ints, got {short_repr(inputs)}")
    try:
        args = from_mapping(LAYER_ARGS[module], entry, f"{where} ({module})")
    except ValueError as error:  # a value check of the arguments' own (__post_init__)
        raise ConfigError(f"{where} ({module}): {error}") from None
    return LayerSpec(module, tuple(inputs), args)


def parse_model_spec(data: dict, source: str) -> ModelSpec:
    """Validate a model yaml mapping of ours (yolov5's is translated first: yolov5_yaml.mapping_from_yolov5); every
    error names the source and the key."""
    raw = from_mapping(_ModelFile, data, source)
    if raw.activation not in ACTIVATIONS:
        raise ConfigError(f"{source}: key 'activation' must be one of {', '.join(ACTIVATIONS)}, got "
                          f"{short_repr(raw.activation)}")
    entries = [(f"backbone[{i}]", e) for i, e in enumerate(raw.backbone)]
    entries += [(f"head[{i}]", e) for i, e in enumerate(raw.head)]
    layers = tuple(_parse_layer(entry, f"{source}: {where}") for where, entry in entries)
    for index, layer in enumerate(layers):
        if any(not (i == -1 or 0 <= index + i < index or 0 <= i < index) for i in layer.inputs):
            raise ConfigError(f"{source}: layer {index} key 'from' {list(layer.inputs)} must name earlier layers")
    if not layers or layers[-1].module != "Detect":
        raise ConfigError(f"{source}: key 'head' must end with a Detect layer")
    if len(layers[-1].inputs) > 5:  # the loss's objectness balance is known for 1 to 5 levels (docs/yolov5.md, "Loss")
        raise ConfigError(f"{source}: Detect reads {len(layers[-1].inputs)} levels; at most 5 (P3-P7)")
    _check_anchors(raw.anchors, len(layers[-1].inputs), source)
    return ModelSpec(raw.depth_multiple, raw.width_multiple, raw.anchors, raw.nc, layers, source, data, raw.activation)


def _check_anchors(anchors: list[list[float]] | int, levels: int, source: str) -> None:
    if isinstance(anchors, int):
        if anchors < 1:
            raise ConfigError(f"{source}: key 'anchors' as a number is the anchors per level, at least 1, got {anchors}")
        return
    if len(anchors) != levels or any(len(a) % 2 or not a for a in anchors) or len({len(a) for a in anchors}) > 1:
        raise ConfigError(f"{source}: key 'anchors' needs one list of (w, h) pairs per Detect input ({levels}), "
                          "the same number on each, or a number of anchors per level (AutoAnchor computes them)")


def spec_from_yolov5_yaml(yaml: dict, anchors: list[list[float]] | None, source: str,
                          csp_activation: str = "silu") -> ModelSpec:
    """Our spec of a yolov5 model yaml; `anchors` and `csp_activation` as for yolov5_yaml.mapping_from_yolov5 (a
    checkpoint's AutoAnchor result and its BottleneckCSP activation)."""
    return parse_model_spec(mapping_from_yolov5(yaml, source, anchors, csp_activation), source)


def load_model_spec(name: str | Path) -> ModelSpec:
    """Load a model yaml, ours or yolov5's, by bare name (configs/models/) or path."""
    path = resolve_config(name, "models")
    data = read_yaml(path)
    if is_yolov5_format(data):
        data = mapping_from_yolov5(data, str(path))
    return parse_model_spec(data, str(path))


def with_anchors_per_level(spec: ModelSpec, anchors: float) -> ModelSpec:
    """`spec` with round(anchors) anchors per level for AutoAnchor to compute, as yolov5's hyp `anchors` replaces a
    model yaml's (0: `spec` as it is)."""
    if not anchors:
        return spec
    return parse_model_spec({**spec.mapping, "anchors": round(anchors)}, f"{spec.source} (the hyp's anchors)")
