"""Translate an ultralytics/yolov5 model yaml (as stored in its checkpoints) into our ModelSpec."""

from __future__ import annotations

from detect.errors import UserError
from detect.models.spec import ModelSpec, parse_model_spec


def _layer(entry: list, index: int, source: str, csp_activation: str) -> dict:
    """One yolov5 row [from, repeats, module, args] as one of our layer mappings."""
    try:
        inputs, repeats, module, args = entry
    except (TypeError, ValueError):
        raise UserError(f"{source}: layer {index} is not [from, number, module, args]: {entry!r}") from None
    module = str(module).removeprefix("nn.")
    if module in ("Conv", "Focus"):
        layer = {"channels": args[0], "kernel": args[1] if len(args) > 1 else 1,
                 "stride": args[2] if len(args) > 2 else 1}
        if len(args) > 3 and args[3] is not None:
            layer["padding"] = args[3]
    elif module == "C3":
        layer = {"channels": args[0], "repeat": repeats, "shortcut": bool(args[1]) if len(args) > 1 else True}
    elif module == "BottleneckCSP":
        layer = {"channels": args[0], "repeat": repeats, "shortcut": bool(args[1]) if len(args) > 1 else True,
                 "activation": csp_activation}
    elif module == "SPP":
        layer = {"channels": args[0], "kernels": list(args[1]) if len(args) > 1 else [5, 9, 13]}
    elif module == "SPPF":
        layer = {"channels": args[0], "kernel": args[1] if len(args) > 1 else 5}
    elif module == "Upsample" and len(args) > 2 and args[2] == "nearest":
        layer = {"scale": int(args[1])}
    elif module in ("Concat", "Detect"):
        layer = {}
    else:
        raise UserError(f"{source}: layer {index} uses {module}{args}, which detect does not build (yet)")
    return {"module": module, "from": inputs, **layer}


def spec_from_yolov5_yaml(yaml: dict, anchors: list[list[float]], source: str,
                          csp_activation: str = "silu") -> ModelSpec:
    """Our spec of a yolov5 architecture; `anchors` in pixels per level (the checkpoint's, after AutoAnchor);
    `csp_activation` is the one its BottleneckCSP blocks use (the yaml does not say: see layers.CSP_ACTIVATIONS)."""
    try:
        backbone, head = yaml["backbone"], yaml["head"]
        data = {"nc": int(yaml["nc"]), "depth_multiple": float(yaml["depth_multiple"]),
                "width_multiple": float(yaml["width_multiple"]), "anchors": anchors}
    except (KeyError, TypeError, ValueError) as error:
        raise UserError(f"{source}: the stored yolov5 model yaml lacks {error}") from None
    activation = yaml.get("activation")
    if activation not in (None, "nn.SiLU()"):  # v7.0's optional field: the activation of every Conv
        raise UserError(f"{source}: activation {activation} (detect builds yolov5's default, nn.SiLU())")
    rows = list(backbone) + list(head)
    layers = [_layer(row, i, source, csp_activation) for i, row in enumerate(rows)]
    data["backbone"], data["head"] = layers[:len(backbone)], layers[len(backbone):]
    return parse_model_spec(data, source)
