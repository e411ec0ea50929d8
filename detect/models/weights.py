"""Load a model from weights: our checkpoints (weights_only) or ultralytics/yolov5 .pt files (restricted)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from detect.errors import UserError
from detect.models import DetectionModel, build_model, parse_model_spec
from detect.models.safe_io import foreign_globals, load_checkpoint
from detect.models.spec import spec_from_yolov5_yaml
from detect.models.yolov5_pickle import read_yolov5_checkpoint

LOGGER = logging.getLogger(__name__)
LOOKUP_DIR = Path("weights")  # a bare --weights name: the working directory, then ./weights/ (weights/README.md)
# Every checkpoint of ours holds its model under these keys (model_state each); the EMA's is the one to use.
MODEL_KEY, EMA_KEY = "model", "ema"
YOLOV5_DEFAULT_WEIGHTS = "yolov5s.pt"  # val, predict and export without --weights, as yolov5 (looked up, not fetched)


def model_state(model: DetectionModel) -> dict:
    """A model as plain values and tensors: its yaml mapping, class names and state dict."""
    return {"config": model.spec.mapping, "names": list(model.names),
            "state_dict": {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}}


def weights_payload(model: DetectionModel) -> dict:
    """The smallest checkpoint of ours: the model alone (what load_model reads)."""
    return {MODEL_KEY: model_state(model)}


def model_from_state(state: dict, source: str) -> DetectionModel:
    """Rebuild a model saved by model_state."""
    names = list(state["names"])
    model = build_model(parse_model_spec(state["config"], source), num_classes=len(names), names=names)
    model.load_state_dict(state["state_dict"])
    return model


def restore_model_state(model: DetectionModel, state: dict) -> None:
    """Load what model_state saved into `model` (the same architecture, on any device)."""
    model.load_state_dict(state["state_dict"])


def resolve_weights(weights: str | Path) -> Path:
    """A path as given, else a bare name looked up in weights/; a missing file names where to put it."""
    path = Path(weights)
    if path.is_file():
        return path
    if len(path.parts) == 1 and (LOOKUP_DIR / path).is_file():
        return LOOKUP_DIR / path
    raise UserError(f"weights not found: {weights} (give a path, or put the file in {LOOKUP_DIR.resolve()})")


def _is_ours(path: Path) -> bool:
    """Our checkpoints are torch zip files whose pickle names nothing weights_only loading refuses."""
    return foreign_globals(path) == []


def _from_yolov5(path: Path) -> DetectionModel:
    checkpoint = read_yolov5_checkpoint(path)
    anchors = checkpoint.state_dict[next(k for k in checkpoint.state_dict if k.endswith(".anchors"))]
    strides = torch.tensor(checkpoint.stride, dtype=torch.float32).view(-1, 1, 1)
    anchors_px = (anchors.float() * strides).view(anchors.shape[0], -1).tolist()
    spec = spec_from_yolov5_yaml(checkpoint.yaml, anchors_px, f"{path} (yolov5 yaml)", checkpoint.csp_activation)
    model = build_model(spec, num_classes=checkpoint.nc, names=list(checkpoint.names))
    # v5.0's Detect also stores anchor_grid, the anchors in pixels: derived from anchors and strides, so not kept.
    state = {name: tensor.float() if tensor.is_floating_point() else tensor
             for name, tensor in checkpoint.state_dict.items() if not name.endswith(".anchor_grid")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise UserError(f"{path}: yolov5 weights do not fit the model its yaml describes "
                        f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    LOGGER.info("imported ultralytics/yolov5 weights %s (%d tensors, %d classes)", path, len(state), model.nc)
    return model


def load_model(weights: str | Path) -> DetectionModel:
    """The model in `weights` (ours or a yolov5 .pt), in fp32 on the CPU, in eval mode.

    A file that is not ours goes to the yolov5 reader, which resolves no foreign code: anything else it names
    (e.g. os.system) is refused in one line naming it.
    """
    path = resolve_weights(weights)
    if _is_ours(path):
        checkpoint = load_checkpoint(path)
        state = checkpoint.get(EMA_KEY) or checkpoint.get(MODEL_KEY)
        if not isinstance(state, dict) or "config" not in state:
            raise UserError(f"{path}: a checkpoint without a model in it")
        model = model_from_state(state, str(path))
    else:
        model = _from_yolov5(path)
    return model.float().eval()
