"""Stand-ins for the checkpoints ultralytics/yolov5's train.py writes, v5.0 to v7.0, made without yolov5's code.

Every yolov5 class is a stand-in nn.Module under yolov5's module path and name (models.yolo.Model,
models.common.Focus, ...), so the pickle names exactly the globals a real checkpoint names, and the module tree
holds the attributes and state-dict layout of that version: v5.0 has the Focus stem, SPP and a persistent
Detect.anchor_grid buffer; v6.0 on the 6x6 Conv stem and SPPF; v6.2 on call the class DetectionModel. The
payload has the fields of that version's train.py (`ckpt = {...}`) and strip_optimizer. The module tree is built
by our own builder from the version's yaml and re-classed, so a layout error would show as a parameter count
that differs from yolov5's (tests/models/test_yolov5_versions.py).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import sys
import types
from pathlib import Path, PosixPath

import numpy as np
import torch
from torch import nn

from detect.models import DetectionModel, build_model
from detect.models.spec import spec_from_yolov5_yaml
from tests.models.yolov5_yamls import all_yamls
from tests.models.yolov5_yamls import p5 as p5_yaml

# yolov5s.yaml's v5.0 backbone, at depth and width 1 (facts, not code: [from, number, module, args]); v6.0 on and
# the head of both: tests/models/yolov5_yamls.py.
V5_BACKBONE = [
    [-1, 1, "Focus", [64, 3]], [-1, 1, "Conv", [128, 3, 2]], [-1, 3, "C3", [128]], [-1, 1, "Conv", [256, 3, 2]],
    [-1, 9, "C3", [256]], [-1, 1, "Conv", [512, 3, 2]], [-1, 9, "C3", [512]], [-1, 1, "Conv", [1024, 3, 2]],
    [-1, 1, "SPP", [1024, [5, 9, 13]]], [-1, 3, "C3", [1024, False]],
]

def yolov5_yaml(version: str, size: str = "n", nc: int = 80, csp: bool = False, hub: str | None = None) -> dict:
    """The model yaml a yolov5 `version` stores in its checkpoints: yolov5<size>, or `hub`, another of its model
    yamls by file stem (yolov5n6, yolov5s-ghost, ..., v6.0 on); csp: C3 -> BottleneckCSP, as its hub models."""
    yaml = {**(all_yamls()[hub] if hub else p5_yaml(size)), "nc": nc, "ch": 3}
    if version == "v5.0":
        yaml["backbone"] = copy.deepcopy(V5_BACKBONE)
    if csp:
        for key in ("backbone", "head"):
            yaml[key] = [[f, n, "BottleneckCSP" if module == "C3" else module, args] for f, n, module, args in yaml[key]]
    return yaml


@dataclasses.dataclass(frozen=True)
class Version:
    """What one yolov5 release writes: the model class name, Detect's anchor_grid kind and the payload fields."""

    name: str
    model_class: str
    anchor_grid_buffer: bool  # v5.0: a persistent buffer in pixels; later a list of tensors rebuilt at run time
    fields: tuple[str, ...]  # train.py's ckpt dict besides model and ema
    stripped_to_none: tuple[str, ...]  # what strip_optimizer sets to None (besides ema)
    csp_activation: str  # BottleneckCSP's: LeakyReLU(0.1) up to v6.0, SiLU from v6.1


VERSIONS = {
    "v5.0": Version("v5.0", "Model", True, ("epoch", "best_fitness", "training_results", "updates", "optimizer",
                                             "wandb_id"), ("optimizer", "training_results", "wandb_id", "updates"), "leaky_relu"),
    "v6.0": Version("v6.0", "Model", False, ("epoch", "best_fitness", "updates", "optimizer", "wandb_id"),
                    ("optimizer", "training_results", "wandb_id", "updates"), "leaky_relu"),
    "v6.2": Version("v6.2", "DetectionModel", False, ("epoch", "best_fitness", "updates", "optimizer", "wandb_id",
                                                       "opt", "date"),
                    ("optimizer", "best_fitness", "wandb_id", "updates"), "silu"),
    "v7.0": Version("v7.0", "DetectionModel", False, ("epoch", "best_fitness", "updates", "optimizer", "opt", "git",
                                                       "date"), ("optimizer", "best_fitness", "updates"), "silu"),
}
# Our classes -> yolov5's module path; torch.nn classes are pickled as themselves.
YOLOV5_MODULES = {"Detect": "models.yolo", "Conv": "models.common", "Bottleneck": "models.common",
                  "C3": "models.common", "SPPF": "models.common", "SPP": "models.common", "Focus": "models.common",
                  "BottleneckCSP": "models.common", "Concat": "models.common", "GhostConv": "models.common",
                  "GhostBottleneck": "models.common", "C3Ghost": "models.common", "C3TR": "models.common",
                  "TransformerBlock": "models.common", "TransformerLayer": "models.common"}


def _standin_class(module: str, name: str, registry: dict[str, types.ModuleType]) -> type:
    """A bare nn.Module subclass that pickles as module.name (registered in a stand-in module object)."""
    package = registry.setdefault(module, types.ModuleType(module))
    if not hasattr(package, name):
        setattr(package, name, type(name, (nn.Module,), {"__module__": module, "__qualname__": name}))
    return getattr(package, name)


def _as_yolov5(model: DetectionModel, version: Version, yaml: dict, registry: dict) -> nn.Module:
    """Re-class our model's modules as yolov5's and give them yolov5's attributes (in place)."""
    detect, inputs, names = model.detect, model.inputs, model.names
    stride = detect.stride.clone()
    del detect._buffers["stride"], detect._grids  # yolov5's Detect.stride is a plain attribute; no grid cache
    detect._non_persistent_buffers_set.discard("stride")
    detect.stride, detect.grid, detect.inplace = stride, [torch.zeros(1)] * detect.nl, True
    if version.anchor_grid_buffer:
        detect.register_buffer("anchor_grid", (detect.anchors * stride.view(-1, 1, 1)).view(detect.nl, 1, -1, 1, 1, 2))
    else:
        detect.anchor_grid = [torch.zeros(1)] * detect.nl
    for module in model.modules():
        name = type(module).__name__
        if name in YOLOV5_MODULES:
            module.__class__ = _standin_class(YOLOV5_MODULES[name], name, registry)
    for index, layer in enumerate(model.model):  # parse_model's bookkeeping on every layer
        layer.i, layer.f = index, -1 if inputs[index] == [index - 1] else inputs[index]
        layer.type = f"{type(layer).__module__}.{type(layer).__name__}"
        layer.np = sum(parameter.numel() for parameter in layer.parameters())
    del model.spec, model.inputs, model._kept, model.trained  # ours alone (yolov5 keeps its flags in "opt")
    model.__class__ = _standin_class("models.yolo", version.model_class, registry)
    model.yaml, model.nc, model.stride = yaml, len(names), stride
    model.names = dict(enumerate(names)) if version.name == "v7.0" else list(names)
    model.save = sorted({i for row in inputs for i in row if i >= 0})
    model.hyp, model.gr, model.class_weights = {"lr0": 0.01, "momentum": 0.937}, 1.0, torch.ones(len(names))
    if version.name != "v5.0":
        model.inplace = True
    return model


@contextlib.contextmanager
def yolov5_module_names(registry: dict[str, types.ModuleType]):
    """Make the stand-in modules importable by name while pickling (pickle checks that a class is findable)."""
    packages = {"models": types.ModuleType("models"), **registry}
    saved = {name: sys.modules.get(name) for name in packages}
    sys.modules.update(packages)
    try:
        yield
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous


def seeded_model(yaml: dict, names: list[str], csp_activation: str, seed: int = 0) -> DetectionModel:
    """Our model of a yolov5 yaml, with seeded weights and BatchNorm statistics (so outputs tell tensors apart)."""
    torch.manual_seed(seed)
    spec = spec_from_yolov5_yaml(yaml, yaml["anchors"], "stand-in", csp_activation)
    model = build_model(spec, num_classes=len(names), names=list(names))
    with torch.no_grad():
        if isinstance(yaml["anchors"], int):  # `anchors: 3`: the ones AutoAnchor would have computed before saving
            model.detect.anchors.uniform_(0.5, 4.0)
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    return model.eval()


def _optimizer_state(model: nn.Module) -> dict:
    """An SGD state as yolov5 saves it: three groups, momentum buffers, and numpy momentum during warmup."""
    named = list(model.named_parameters())
    biases = [p for n, p in named if n.endswith(".bias")]
    norms = [p for n, p in named if n.endswith(".weight") and ".bn." in n]
    weights = [p for n, p in named if n.endswith(".weight") and ".bn." not in n]
    optimizer = torch.optim.SGD(norms, lr=0.01, momentum=0.937, nesterov=True)
    optimizer.add_param_group({"params": weights, "weight_decay": 5e-4})
    optimizer.add_param_group({"params": biases})
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 1e-3)
    optimizer.step()
    model.zero_grad(set_to_none=True)
    for group in optimizer.param_groups:
        group["momentum"] = np.float64(0.80959)  # np.interp's result, as train.py writes it during warmup
    return optimizer.state_dict()


def _opt(version: str) -> dict:
    """vars(opt) of a train.py run: paths as PosixPath where argparse defaults are ROOT / ... (v6.2 on)."""
    opt = {"weights": "yolov5n.pt", "cfg": "", "data": "data/custom.yaml", "hyp": {"lr0": 0.01, "momentum": 0.937},
           "epochs": 3, "batch_size": 16, "imgsz": 640, "evolve": None, "device": "0", "save_period": 1,
           "project": PosixPath("runs/train"), "save_dir": "runs/train/exp", "name": "exp"}
    if version == "v7.0":
        opt["evolve_population"] = PosixPath("data/hyps")
    return opt


def standin_checkpoint(path: Path, version: str, *, names: tuple[str, ...] = ("cat", "dog", "bird"), size: str = "n",
                       csp: bool = False, hub: str | None = None, stripped: bool = False, half: bool = True,
                       ema: bool = True, extra_fields: dict | None = None) -> DetectionModel:
    """Write `path` as yolov5 `version`'s train.py would (stripped: after strip_optimizer, always fp16; else a
    mid-run last.pt or epoch<N>.pt, fp16 as train.py saves it or fp32), plus `extra_fields` (a fork's own);
    return our fp32 model holding the same weights, the reference the import must equal."""
    spec = VERSIONS[version]
    yaml = yolov5_yaml(version, size, len(names), csp, hub)
    model = seeded_model(yaml, list(names), spec.csp_activation)
    registry: dict[str, types.ModuleType] = {}
    optimizer = _optimizer_state(copy.deepcopy(model).train())
    standin = _as_yolov5(copy.deepcopy(model).train(), spec, yaml, registry)
    half = half or stripped
    cast = (lambda m: m.half()) if half else (lambda m: m.float())
    values = {"epoch": 2, "best_fitness": np.array([0.3512]), "training_results": "0/2 0.05 0.03 ...", "updates": 24,
              "optimizer": optimizer, "wandb_id": None, "opt": _opt(version),
              "git": {"remote": None, "branch": None, "commit": None}, "date": "2026-11-30T10:00:00"}
    payload = {"model": cast(copy.deepcopy(standin)), "ema": cast(copy.deepcopy(standin)) if ema else None}
    payload.update({field: values[field] for field in spec.fields})
    if stripped:  # strip_optimizer: ema replaces model, the listed keys become None, epoch -1, frozen fp16
        if payload["ema"] is not None:
            payload["model"] = payload["ema"]
        payload.update(dict.fromkeys((*spec.stripped_to_none, "ema")), epoch=-1)
        payload["model"].half().requires_grad_(False)
    payload.update(extra_fields or {})
    with yolov5_module_names(registry):
        torch.save(payload, path)
    if half:
        model.load_state_dict({name: tensor.half().float() if tensor.is_floating_point() else tensor
                               for name, tensor in model.state_dict().items()})
    return model
