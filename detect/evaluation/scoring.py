"""A model file made ready to score on a data split: loaded by its runtime, with the val loader that fits it
(val's tasks and export's --check share this)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

from detect.backend import Backend
from detect.data import ValLoaderSettings, load_data_config, load_split
from detect.data.data_config import open_storage
from detect.data.labels.check import DEFAULT_BOUNDS, ImageBounds
from detect.data.loader import Loader, build_val_loader
from detect.data.tiles.windows import TileSettings
from detect.errors import UserError
from detect.inference.model import input_size, load_inference_model
from detect.inference.predictor import Predictor
from detect.inference.slicing import SlicedPredictor, SliceSettings
from detect.inference.tta import augment_model

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ScoredSplit:
    """The split a model is scored on: `name` of data yaml `data`, its label cache in `cache_dir` (--cache-dir), an
    image beyond `bounds` skipped by the label check."""

    data: str
    name: str = "val"
    cache_dir: str | None = None
    bounds: ImageBounds = DEFAULT_BOUNDS


def prepare_scoring(weights: str | Path | Sequence[str | Path], split: ScoredSplit, backend: Backend,
                    loading: ValLoaderSettings, *, half: bool = False, augment: bool = False,
                    slicing: SliceSettings | None = None) -> tuple[Predictor | SlicedPredictor, Loader]:
    """The model's predict (fused, fp32 unless `half`: docs/yolov5.md, "Validation during training"; an export in its
    runtime; several paths: one ensemble; with `augment`, test-time augmentation) and the loader of `split`, in one
    pass: the data yaml, the model (its classes checked against the yaml's at once), then the loader. `loading` gives
    the size, batch, workers and whether batches are rectangular (not for a static export, which needs square
    letterboxes; no size: the one the model's file records, inference/model.py's input_size); the stride, a static
    export's shape and pinned memory come from the model and the backend; one line names the model, data and size. With
    `slicing`, the model runs on windows of each image at full resolution (inference/slicing.py), scored against the
    image's own labels."""
    data_config, storage = open_storage(load_data_config(split.data), split.cache_dir)
    model = load_inference_model(weights, backend, half)
    if len(data_config.names) != len(model.names):
        raise UserError(f"the model predicts {len(model.names)} classes but {split.data} has "
                        f"{len(data_config.names)}")
    predictor = augment_model(model) if augment else Predictor(model, model.nms)
    loading = dataclasses.replace(loading, stride=model.stride, fixed_shape=model.fixed_shape,
                                  pin_memory=backend.device.type != "cpu")
    if slicing is not None:
        if model.fixed_shape is not None:
            raise UserError(f"--slice runs windows of {slicing.size} px: this export is static at {model.fixed_shape}; "
                            "export it --dynamic")
        predictor = SlicedPredictor(predictor, backend, slicing, model.stride)
        windows = TileSettings(predictor.settings.size, slicing.overlap, max_windows=slicing.max_windows)
        loading = dataclasses.replace(loading, windows=windows)
    checked = load_split(data_config, split.name, cache_dir=split.cache_dir, bounds=split.bounds, storage=storage)
    size = input_size(model, None if loading.imgsz is None else [loading.imgsz])
    named = str(weights) if isinstance(weights, (str, Path)) else " + ".join(map(str, weights))
    if slicing is None:
        LOGGER.info("%s on %s (%s split) at %s", named, split.data, split.name, size)
    else:
        counts = [predictor.window_count(int(height), int(width))
                  for height, width in zip(checked.records.heights, checked.records.widths)]
        LOGGER.info("%s on %s (%s split) in windows of %d px, overlap %g: %d to %d an image, %d in all (--max-det "
                    "caps each window's detections)", named, split.data, split.name, predictor.settings.size,
                    slicing.overlap, min(counts), max(counts), sum(counts))
    return predictor, build_val_loader(checked, dataclasses.replace(loading, imgsz=size.side))
