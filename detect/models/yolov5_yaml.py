"""Translate an ultralytics/yolov5 model yaml (its files, or the one stored in its checkpoints) into our mapping.

yolov5 writes a layer as a row [from, number, module, args] and evals the module and arguments as Python; here
each row becomes one of our named-key layers (spec.py), and nothing in the file is ever evaluated.
"""

from __future__ import annotations

from typing import Any

from detect.errors import ConfigError, refuse_unknown_keys, short_repr

# yolov5's positional arguments, by our key names (its parse_model has already put in the input channels).
POSITIONAL = {
    "Conv": ("channels", "kernel", "stride", "padding"), "Focus": ("channels", "kernel", "stride", "padding"),
    "GhostConv": ("channels", "kernel", "stride"), "Bottleneck": ("channels", "shortcut"),
    "C3": ("channels", "shortcut"), "C3Ghost": ("channels", "shortcut"), "C3TR": ("channels", "shortcut"),
    "BottleneckCSP": ("channels", "shortcut"), "SPP": ("channels", "kernels"), "SPPF": ("channels", "kernel"),
    "MaxPool2d": ("kernel", "stride", "padding"), "ZeroPad2d": ("padding",),
    "Upsample": ("size", "scale", "mode"), "Concat": ("dimension",), "Detect": ("nc", "anchors"),
}
# yolov5 passes the row's number to these as their repeats; any other module with a number > 1 is refused here.
REPEATED = ("C3", "C3Ghost", "C3TR", "BottleneckCSP", "Bottleneck")
# yolov5 evals `activation` and makes it every Conv's: the ones detect builds, as yolov5 spells them.
ACTIVATIONS = {"nn.SiLU()": "silu", "nn.LeakyReLU(0.1)": "leaky_relu", "nn.ReLU()": "relu", "nn.ReLU6()": "relu6",
               "nn.Hardswish()": "hardswish", "nn.Mish()": "mish", "nn.GELU()": "gelu"}
KEYS = ("nc", "depth_multiple", "width_multiple", "anchors", "backbone", "head", "activation", "channel_multiple",
        "ch")  # ch: the input channels yolov5 stores in its checkpoints' yaml (always 3)


def is_yolov5_format(data: dict) -> bool:
    """True when the backbone's rows are lists (yolov5's [from, number, module, args]), not our mappings."""
    rows = data.get("backbone")
    return isinstance(rows, list) and any(isinstance(row, list) for row in rows)


def _layer(row: Any, where: str, csp_activation: str) -> dict:
    """One yolov5 row [from, number, module, args] as one of our layer mappings."""
    if not (isinstance(row, list) and len(row) == 4):
        raise ConfigError(f"{where}: a yolov5 layer must be a list [from, number, module, args], got {short_repr(row)}")
    inputs, number, module, args = row
    module = module.removeprefix("nn.") if isinstance(module, str) else module
    if not isinstance(module, str) or module not in POSITIONAL:
        raise ConfigError(f"{where}: module {short_repr(module)} is not one detect builds ({', '.join(POSITIONAL)})")
    where = f"{where} ({module})"
    if not isinstance(args, list) or len(args) > len(POSITIONAL[module]):
        raise ConfigError(f"{where}: args must be a list of at most {len(POSITIONAL[module])} "
                          f"[{', '.join(POSITIONAL[module])}], got {short_repr(args)}")
    if type(number) is not int or number < 1:
        raise ConfigError(f"{where}: number must be an int >= 1, got {short_repr(number)}")
    if number > 1 and module not in REPEATED:
        raise ConfigError(f"{where}: number {number}: detect repeats only {', '.join(REPEATED)}")
    # yolov5 evals string arguments: its files write None unquoted, which yaml reads as the string "None".
    layer = dict(zip(POSITIONAL[module], (None if arg == "None" else arg for arg in args)))
    if module in REPEATED:
        layer["repeat"] = number
    if module == "BottleneckCSP":
        layer["activation"] = csp_activation
    if module in ("Detect", "Concat", "Upsample"):
        layer = _fixed_arguments(module, layer, where)
    if module == "ZeroPad2d" and isinstance(layer.get("padding"), int):
        layer["padding"] = [layer["padding"]] * 4
    return {"module": module, "from": inputs, **layer}


def _fixed_arguments(module: str, layer: dict, where: str) -> dict:
    """Detect's arguments are the yaml's nc and anchors; Concat and Upsample build only yolov5's own usage."""
    if module == "Concat" and layer.get("dimension", 1) != 1:
        raise ConfigError(f"{where}: detect concatenates along channels only (dimension 1), got "
                          f"{short_repr(layer['dimension'])}")
    if module == "Upsample":
        if layer.get("size") is not None or layer.get("mode", "nearest") != "nearest":
            raise ConfigError(f"{where}: detect builds Upsample [None, scale, 'nearest'] only, got "
                              f"{list(layer.values())}")
        return {"scale": layer["scale"]} if "scale" in layer else {}
    return {}


def mapping_from_yolov5(yaml: dict, source: str, anchors: list[list[float]] | None = None,
                        csp_activation: str = "silu") -> dict:
    """Our model mapping of a yolov5 model yaml. `anchors` (pixels per level) replaces the yaml's, as a checkpoint's
    AutoAnchor result does; `csp_activation` is the one its BottleneckCSP blocks use (the yaml does not say: it is
    LeakyReLU(0.1) up to yolov5 v6.0, see layers.BottleneckCSP)."""
    for key in ("backbone", "head"):
        if not isinstance(yaml.get(key), list):
            raise ConfigError(f"{source}: key '{key}' must be a list of [from, number, module, args] rows, "
                              f"got {type(yaml.get(key)).__name__}")
    activation = yaml.get("activation")
    if activation is not None and activation not in ACTIVATIONS:
        raise ConfigError(f"{source}: key 'activation' {short_repr(activation)} is not one detect builds "
                          f"({', '.join(ACTIVATIONS)})")
    if yaml.get("channel_multiple", 8) != 8:  # yolov5 rounds channels to multiples of it
        raise ConfigError(f"{source}: key 'channel_multiple' {short_repr(yaml['channel_multiple'])}: detect rounds to "
                          "8 only")
    data = {key: yaml[key] for key in ("nc", "depth_multiple", "width_multiple", "anchors") if key in yaml}
    if anchors is not None:
        data["anchors"] = anchors
    if activation is not None:
        data["activation"] = ACTIVATIONS[activation]
    for key in ("backbone", "head"):
        data[key] = [_layer(row, f"{source}: {key}[{i}]", csp_activation) for i, row in enumerate(yaml[key])]
    refuse_unknown_keys(yaml, KEYS, f"{source}:", "known in a yolov5 model yaml")
    return data

