"""Load a model from weights: our checkpoints (weights_only) or ultralytics/yolov5 .pt files (restricted)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from detect.atomic_file import protect
from detect.errors import UserError
from detect.models import DetectionModel, parse_model_spec
from detect.models.safe_io import MODEL_KEY, TRAINED_KEY, read_stored_model, stored_state
from detect.models.stored import TrainedWith
from detect.models.yolo import build_stored

LOGGER = logging.getLogger(__name__)
LOOKUP_DIR = Path("weights")  # a bare --weights name: the working directory, then ./weights/ (weights/README.md)
YOLOV5_DEFAULT_WEIGHTS = "yolov5s.pt"  # val, predict and export without --weights, as yolov5 (looked up, not fetched)


def model_state(model: DetectionModel, trained: TrainedWith | None = None) -> dict:
    """A model as plain values and tensors: its yaml mapping, class names and state dict, and what it was trained with
    (`trained`, else the model's own record, when there is one)."""
    trained = trained or model.trained
    return {"config": model.spec.mapping, "names": list(model.names),
            "state_dict": {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()},
            **({TRAINED_KEY: dataclasses.asdict(trained)} if trained != TrainedWith() else {})}


def weights_payload(model: DetectionModel) -> dict:
    """The smallest checkpoint of ours: the model alone (what load_model reads)."""
    return {MODEL_KEY: model_state(model)}


def model_from_state(state: dict, source: str, refuse_nonfinite: bool = True) -> DetectionModel:
    """Rebuild a model saved by model_state; weights that do not fit its yaml, or (refuse_nonfinite) hold NaN or
    inf, are a UserError naming `source` (yolo.check_fit, yolo.check_finite)."""
    stored = stored_state(state, source)
    return build_stored(parse_model_spec(stored.mapping, stored.yaml_source), stored, refuse_nonfinite)


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


def load_model(weights: str | Path, refuse_nonfinite: bool = True) -> DetectionModel:
    """The model in `weights` (ours or a yolov5 .pt), in fp32 on the CPU, in eval mode. Weights that do not fit the
    file's own yaml and names are refused in one line, and so are NaN or inf weights unless not `refuse_nonfinite`
    (then a warning: a finished run's own best.pt is scored as it is).

    A file that is not ours goes to the yolov5 reader, which resolves no foreign code: anything else it names
    (e.g. os.system) is refused in one line naming it.
    """
    path = resolve_weights(weights)
    protect([path], "the weights")
    stored = read_stored_model(path)
    model = build_stored(parse_model_spec(stored.mapping, stored.yaml_source), stored, refuse_nonfinite)
    if stored.yolov5:
        LOGGER.info("imported ultralytics/yolov5 weights %s (%d tensors, %d classes)", path, len(stored.state_dict),
                    model.nc)
    return model.float().eval()
