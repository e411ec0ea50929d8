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


def model_from_state(state: dict, source: str, refuse_nonfinite: bool = True) -> DetectionModel:
    """Rebuild a model saved by model_state; weights that do not fit its yaml, or (refuse_nonfinite) hold NaN or
    inf, are a UserError naming `source` (check_fit, check_finite)."""
    names = list(state["names"])
    model = build_model(parse_model_spec(state["config"], source), num_classes=len(names), names=names)
    check_fit(model, state["state_dict"], source)
    model.load_state_dict(state["state_dict"])
    check_finite(state["state_dict"], source, refuse_nonfinite)
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


def _from_yolov5(path: Path, refuse_nonfinite: bool) -> DetectionModel:
    checkpoint = read_yolov5_checkpoint(path)
    anchors = checkpoint.state_dict[next(k for k in checkpoint.state_dict if k.endswith(".anchors"))]
    strides = torch.tensor(checkpoint.stride, dtype=torch.float32).view(-1, 1, 1)
    anchors_px = (anchors.float() * strides).view(anchors.shape[0], -1).tolist()
    spec = spec_from_yolov5_yaml(checkpoint.yaml, anchors_px, f"{path} (yolov5 yaml)", checkpoint.csp_activation)
    model = build_model(spec, num_classes=checkpoint.nc, names=list(checkpoint.names))
    # v5.0's Detect also stores anchor_grid, the anchors in pixels: derived from anchors and strides, so not kept.
    state = {name: tensor.float() if tensor.is_floating_point() else tensor
             for name, tensor in checkpoint.state_dict.items() if not name.endswith(".anchor_grid")}
    check_fit(model, state, f"{path} (yolov5)")
    model.load_state_dict(state)
    check_finite(state, path, refuse_nonfinite)
    LOGGER.info("imported ultralytics/yolov5 weights %s (%d tensors, %d classes)", path, len(state), model.nc)
    return model


def load_model(weights: str | Path, refuse_nonfinite: bool = True) -> DetectionModel:
    """The model in `weights` (ours or a yolov5 .pt), in fp32 on the CPU, in eval mode. Weights that do not fit the
    file's own yaml and names are refused in one line, and so are NaN or inf weights unless not `refuse_nonfinite`
    (then a warning: a finished run's own best.pt is scored as it is).

    A file that is not ours goes to the yolov5 reader, which resolves no foreign code: anything else it names
    (e.g. os.system) is refused in one line naming it.
    """
    path = resolve_weights(weights)
    if _is_ours(path):
        checkpoint = load_checkpoint(path)
        state = checkpoint.get(EMA_KEY) or checkpoint.get(MODEL_KEY)
        if not isinstance(state, dict) or "config" not in state:
            raise UserError(f"{path}: a checkpoint without a model in it")
        model = model_from_state(state, str(path), refuse_nonfinite)
    else:
        model = _from_yolov5(path, refuse_nonfinite)
    return model.float().eval()
