"""A model file made ready to score on a data split: loaded by its runtime, with the val loader that fits it
(val's tasks and export's --check share this)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from detect.backend import Backend
from detect.data import load_data_config
from detect.data.labels.check import DEFAULT_BOUNDS, ImageBounds
from detect.data.loader import Loader, build_val_loader
from detect.errors import UserError
from detect.inference.model import load_inference_model
from detect.inference.predictor import Predictor
from detect.inference.tta import augment_model


def prepare_scoring(weights: str | Path | Sequence[str | Path], data: str, split: str, imgsz: int, batch_size: int,
                    workers: int | None, backend: Backend, *, half: bool = False, augment: bool = False,
                    rect: bool | None = None, cache_dir: str | None = None,
                    bounds: ImageBounds = DEFAULT_BOUNDS) -> tuple[Predictor, Loader]:
    """The model's predict (fused, fp32 unless `half`: docs/yolov5.md, "Validation during training"; an export in its
    runtime; several paths: one ensemble; with `augment`, test-time augmentation) and the loader of `split`, in one
    pass: the data yaml, the model (its classes checked against the yaml's at once), then the loader. Rectangular batches where the model takes them,
    unless `rect` is False (square letterboxes, as a static export needs). `cache_dir`: the label cache's folder;
    `bounds`: an image beyond them is skipped by the label check."""
    data_config = load_data_config(data)
    model = load_inference_model(weights, backend, half)
    if len(data_config.names) != len(model.names):
        raise UserError(f"the model predicts {len(model.names)} classes but {data} has {len(data_config.names)}")
    predictor = augment_model(model) if augment else Predictor(model, model.nms)
    loader = build_val_loader(data_config, split, imgsz, batch_size, workers, stride=model.stride,
                              rect=rect is not False, pin_memory=backend.device.type != "cpu", cache_dir=cache_dir,
                              bounds=bounds, fixed_shape=model.fixed_shape)
    return predictor, loader
