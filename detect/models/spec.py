"""The model yaml schema: scale multiples, anchors and a list of named layers (configs/models/*.yaml)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from detect.config import from_mapping, read_yaml, resolve_config
from detect.errors import ConfigError


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
            raise ValueError(f"key 'activation' must be silu or leaky_relu, got {self.activation!r}")


@dataclasses.dataclass(frozen=True)
class UpsampleArgs:
    scale: int = 2


@dataclasses.dataclass(frozen=True)
class NoArgs:
    """Concat and Detect take only their inputs (`from`)."""


# Focus takes a Conv's arguments; Focus, SPP and BottleneckCSP are the yolov5 v5.0-era blocks.
LAYER_ARGS = {"Conv": ConvArgs, "C3": C3Args, "SPPF": SPPFArgs, "Upsample": UpsampleArgs,
              "Concat": NoArgs, "Detect": NoArgs, "Focus": ConvArgs, "SPP": SPPArgs, "BottleneckCSP": BottleneckCSPArgs}


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    """One layer: its module name, the earlier layers it reads (-1 = the previous one) and its arguments."""

    module: str
    inputs: tuple[int, ...]
    args: Any


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A whole model: depth/width multiples, anchors in pixels per level, classes and the layer list."""

    depth_multiple: float
    width_multiple: float
    anchors: list[list[float]]
    num_classes: int
    layers: tuple[LayerSpec, ...]
    source: str
    mapping: dict  # the yaml mapping it was parsed from, stored in checkpoints to rebuild the model


@dataclasses.dataclass(frozen=True)
class _ModelFile:
    depth_multiple: float
    width_multiple: float
    anchors: list[list[float]]
    backbone: list[dict]
    head: list[dict]
    nc: int = 80


def _parse_layer(entry: Any, where: str) -> LayerSpec:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: each layer must be a mapping, got {entry!r}")
    entry = dict(entry)
    module = entry.pop("module", None)
    if module not in LAYER_ARGS:
        raise ConfigError(f"{where}: key 'module' must be one of {', '.join(LAYER_ARGS)}, got {module!r}")
    inputs = entry.pop("from", -1)
    inputs = (inputs,) if isinstance(inputs, int) else inputs
    if not (isinstance(inputs, (list, tuple)) and inputs and all(type(i) is int for i in inputs)):
        raise ConfigError(f"{where}: key 'from' must be an int or a list of ints, got {inputs!r}")
    try:
        args = from_mapping(LAYER_ARGS[module], entry, f"{where} ({module})")
    except ValueError as error:  # a value check of the arguments' own (__post_init__)
        raise ConfigError(f"{where} ({module}): {error}") from None
    return LayerSpec(module, tuple(inputs), args)


def parse_model_spec(data: dict, source: str) -> ModelSpec:
    """Validate a model yaml mapping; every error names the source and the key."""
    raw = from_mapping(_ModelFile, data, source)
    entries = [(f"backbone[{i}]", e) for i, e in enumerate(raw.backbone)]
    entries += [(f"head[{i}]", e) for i, e in enumerate(raw.head)]
    layers = tuple(_parse_layer(entry, f"{source}: {where}") for where, entry in entries)
    for index, layer in enumerate(layers):
        if any(not (i == -1 or 0 <= index + i < index or 0 <= i < index) for i in layer.inputs):
            raise ConfigError(f"{source}: layer {index} key 'from' {list(layer.inputs)} must name earlier layers")
    if not layers or layers[-1].module != "Detect":
        raise ConfigError(f"{source}: key 'head' must end with a Detect layer")
    if len(layers[-1].inputs) != len(raw.anchors) or any(len(a) % 2 or not a for a in raw.anchors):
        raise ConfigError(f"{source}: key 'anchors' needs one list of (w, h) pairs per Detect input")
    return ModelSpec(raw.depth_multiple, raw.width_multiple, raw.anchors, raw.nc, layers, source, data)


def load_model_spec(name: str | Path) -> ModelSpec:
    """Load a model yaml by bare name (configs/models/) or path."""
    path = resolve_config(name, "models")
    return parse_model_spec(read_yaml(path), str(path))
