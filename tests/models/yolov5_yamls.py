"""The 23 model yamls of ultralytics/yolov5 (master 5081342f0), as the mappings yaml.safe_load gives of them, made
by a few functions (most are one feature pyramid with other levels or blocks). Facts, not copies of the files:
[from, number, module, args] rows as yolov5's format writes them, and the parameter counts at nc=80 that yolov5's
own Model() gives (docs/yolov5.md, "Parameter counts and FLOPs")."""

from __future__ import annotations

import copy

ANCHORS_P5 = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]]
ANCHORS_P6 = [[19, 27, 44, 40, 38, 94], [96, 68, 86, 152, 180, 137], [140, 301, 303, 264, 238, 542],
              [436, 615, 739, 380, 925, 792]]
SIZES = {"n": (0.33, 0.25), "s": (0.33, 0.50), "m": (0.67, 0.75), "l": (1.0, 1.0), "x": (1.33, 1.25)}
UPSAMPLE = [-1, 1, "nn.Upsample", ["None", 2, "nearest"]]  # yaml reads None as the string "None"
# Backbone output channels per level P2..P7 (before width_multiple) and the P2-P4 layer indices.
CHANNELS = {2: 128, 3: 256, 4: 512}
BACKBONE_INDEX = {2: 2, 3: 4, 4: 6}

PARAMETERS = {
    "yolov3-spp": 62_998_749, "yolov3-tiny": 8_852_366, "yolov3": 61_949_149, "yolov5-bifpn": 46_825_853,
    "yolov5-fpn": 41_117_565, "yolov5-p2": 47_493_372, "yolov5-p34": 5_331_518, "yolov5-p6": 76_770_172,
    "yolov5-p7": 144_281_723, "yolov5-panet": 46_563_709, "yolov5l6": 76_770_172, "yolov5m6": 35_731_932,
    "yolov5n6": 3_246_940, "yolov5s-LeakyReLU": 7_235_389, "yolov5s-ghost": 3_897_605,
    "yolov5s-transformer": 7_235_645, "yolov5s6": 12_626_620, "yolov5x6": 140_794_780, "yolov5l": 46_563_709,
    "yolov5m": 21_190_557, "yolov5n": 1_872_157, "yolov5s": 7_235_389, "yolov5x": 86_749_405,
}


def _model(depth: float, width: float, anchors, backbone: list, head: list, **extra) -> dict:
    return {"nc": 80, **extra, "depth_multiple": depth, "width_multiple": width, "anchors": copy.deepcopy(anchors),
            "backbone": backbone, "head": head}


def backbone(top: list[int]) -> list:
    """The v6 backbone: 6x6 stem, then a stride-2 Conv and a C3 per level up to the last of `top` (channels of
    P5, P6, ...), and SPPF."""
    rows = [[-1, 1, "Conv", [64, 6, 2, 2]], [-1, 1, "Conv", [128, 3, 2]], [-1, 3, "C3", [128]]]
    for channels, repeats in [(256, 6), (512, 9)] + [(c, 3) for c in top]:
        rows += [[-1, 1, "Conv", [channels, 3, 2]], [-1, repeats, "C3", [channels]]]
    return rows + [[-1, 1, "SPPF", [top[-1], 5]]]


def pyramid(top: list[int], lowest: int = 3, highest: int | None = None) -> list:
    """The PANet head over levels `lowest`..P(4 + len(top)): down with 1x1 Conv, upsample, concat backbone, C3;
    up with stride-2 Conv, concat the 1x1 Conv of that level, C3; Detect on `lowest`..`highest` (default: top)."""
    channels = {**CHANNELS, **{5 + i: c for i, c in enumerate(top)}}
    indices = {**BACKBONE_INDEX, **{5 + i: 8 + 2 * i for i in range(len(top))}}
    top_level = max(channels)
    rows, first = [], 2 * len(top) + 8
    lateral, outputs = {}, {}
    for level in range(top_level - 1, lowest - 1, -1):
        lateral[level + 1] = first + len(rows)
        repeats = 1 if level == 2 else 3  # P2's C3 is a single block
        rows += [[-1, 1, "Conv", [channels[level], 1, 1]], UPSAMPLE, [[-1, indices[level]], 1, "Concat", [1]],
                 [-1, repeats, "C3", [channels[level], False]]]
    outputs[lowest] = first + len(rows) - 1
    for level in range(lowest + 1, (highest or top_level) + 1):
        rows += [[-1, 1, "Conv", [channels[level - 1], 3, 2]], [[-1, lateral[level]], 1, "Concat", [1]],
                 [-1, 3, "C3", [channels[level], False]]]
        outputs[level] = first + len(rows) - 1
    return rows + [[list(outputs.values()), 1, "Detect", ["nc", "anchors"]]]


def p5(size: str = "l", **extra) -> dict:
    return _model(*SIZES[size], extra.pop("anchors", ANCHORS_P5), backbone([1024]), pyramid([1024]), **extra)


def p6(size: str = "l", anchors=ANCHORS_P6) -> dict:
    return _model(*SIZES[size], anchors, backbone([768, 1024]), pyramid([768, 1024]))


def p7() -> dict:
    return _model(1.0, 1.0, 3, backbone([768, 1024, 1280]), pyramid([768, 1024, 1280]))


def ghost() -> dict:
    """yolov5s with GhostConv for every Conv but the stem and C3Ghost for every C3."""
    model = p5("s")
    for index, row in enumerate(model["backbone"] + model["head"]):
        row[2] = {"C3": "C3Ghost", "Conv": "Conv" if index == 0 else "GhostConv"}.get(row[2], row[2])
    return model


def fpn() -> dict:
    """Top-down only: C3 before each upsample, Detect on the C3 outputs."""
    head = [[-1, 3, "C3", [1024, False]], UPSAMPLE, [[-1, 6], 1, "Concat", [1]], [-1, 1, "Conv", [512, 1, 1]],
            [-1, 3, "C3", [512, False]], UPSAMPLE, [[-1, 4], 1, "Concat", [1]], [-1, 1, "Conv", [256, 1, 1]],
            [-1, 3, "C3", [256, False]], [[18, 14, 10], 1, "Detect", ["nc", "anchors"]]]
    return _model(1.0, 1.0, ANCHORS_P5, backbone([1024]), head)


def darknet53() -> list:
    """yolov3's backbone: Conv, then per level a stride-2 Conv and residual Bottlenecks (1, 2, 8, 8, 4)."""
    rows = [[-1, 1, "Conv", [32, 3, 1]]]
    for channels, repeats in [(64, 1), (128, 2), (256, 8), (512, 8), (1024, 4)]:
        rows += [[-1, 1, "Conv", [channels, 3, 2]], [-1, repeats, "Bottleneck", [channels]]]
    return rows


def yolov3(spp: bool = False) -> dict:
    second = [-1, 1, "SPP", [512, [5, 9, 13]]] if spp else [-1, 1, "Conv", [512, 1, 1]]
    head = [[-1, 1, "Bottleneck", [1024, False]], second, [-1, 1, "Conv", [1024, 3, 1]],
            [-1, 1, "Conv", [512, 1, 1]], [-1, 1, "Conv", [1024, 3, 1]],
            [-2, 1, "Conv", [256, 1, 1]], UPSAMPLE, [[-1, 8], 1, "Concat", [1]],
            [-1, 1, "Bottleneck", [512, False]], [-1, 1, "Bottleneck", [512, False]], [-1, 1, "Conv", [256, 1, 1]],
            [-1, 1, "Conv", [512, 3, 1]],
            [-2, 1, "Conv", [128, 1, 1]], UPSAMPLE, [[-1, 6], 1, "Concat", [1]],
            [-1, 1, "Bottleneck", [256, False]], [-1, 2, "Bottleneck", [256, False]],
            [[27, 22, 15], 1, "Detect", ["nc", "anchors"]]]
    return _model(1.0, 1.0, ANCHORS_P5, darknet53(), head)


def yolov3_tiny() -> dict:
    rows = []
    for channels in (16, 32, 64, 128, 256):
        rows += [[-1, 1, "Conv", [channels, 3, 1]], [-1, 1, "nn.MaxPool2d", [2, 2, 0]]]
    rows += [[-1, 1, "Conv", [512, 3, 1]], [-1, 1, "nn.ZeroPad2d", [[0, 1, 0, 1]]], [-1, 1, "nn.MaxPool2d", [2, 1, 0]]]
    head = [[-1, 1, "Conv", [1024, 3, 1]], [-1, 1, "Conv", [256, 1, 1]], [-1, 1, "Conv", [512, 3, 1]],
            [-2, 1, "Conv", [128, 1, 1]], UPSAMPLE, [[-1, 8], 1, "Concat", [1]], [-1, 1, "Conv", [256, 3, 1]],
            [[19, 15], 1, "Detect", ["nc", "anchors"]]]
    anchors = [[10, 14, 23, 27, 37, 58], [81, 82, 135, 169, 344, 319]]
    return _model(1.0, 1.0, anchors, rows, head)


def _edited(model: dict, edit) -> dict:
    edit(model)
    return model


def all_yamls() -> dict[str, dict]:
    """Every yolov5 model yaml by file stem."""
    yamls = {f"yolov5{size}": p5(size) for size in SIZES}
    yamls |= {f"yolov5{size}6": p6(size) for size in SIZES}
    yamls |= {
        "yolov5-p6": p6("l", anchors=3), "yolov5-p7": p7(), "yolov5-panet": p5("l"), "yolov5-fpn": fpn(),
        "yolov5-p2": _model(1.0, 1.0, 3, backbone([1024]), pyramid([1024], lowest=2)),
        "yolov5-p34": _model(0.33, 0.5, 3, backbone([1024]), pyramid([1024], highest=4)),
        "yolov5-bifpn": _edited(p5("l"), lambda m: m["head"][9].__setitem__(0, [-1, 14, 6])),
        "yolov5s-LeakyReLU": p5("s", activation="nn.LeakyReLU(0.1)"),
        "yolov5s-ghost": ghost(),
        "yolov5s-transformer": _edited(p5("s"), lambda m: m["backbone"][8].__setitem__(2, "C3TR")),
        "yolov3": yolov3(), "yolov3-spp": yolov3(spp=True), "yolov3-tiny": yolov3_tiny(),
    }
    return yamls
