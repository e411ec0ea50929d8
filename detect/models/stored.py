"""A model as a weights file holds it, before it is built: its yaml mapping, classes and tensors (`StoredModel`), and
what the file records of the training that made it (`TrainedWith`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from detect.config import IMAGE_SIZE
from detect.errors import UserError, short_repr


@dataclasses.dataclass(frozen=True)
class TrainedWith:
    """What a weights file records of the training that made it: the image side it trained at and its data yaml as the
    run was given it (None: not recorded, as in yolov5's release weights)."""

    imgsz: int | None = None
    data: str | None = None

    @classmethod
    def read(cls, values: Any, source: str) -> TrainedWith:
        """The record as a checkpoint of ours holds it ({"imgsz": int, "data": str}, either None); anything else is a
        UserError naming `source`."""
        if isinstance(values, dict):
            imgsz, data = values.get("imgsz"), values.get("data")
            if (imgsz is None or type(imgsz) is int and IMAGE_SIZE.accept(imgsz)) and (data is None or
                                                                                  isinstance(data, str)):
                return cls(imgsz, data)
        raise UserError(f"{source}: its record of the training ({short_repr(values)}) is not an image size "
                        f"({IMAGE_SIZE.what}) and a data yaml")


@dataclasses.dataclass(frozen=True)
class StoredModel:
    """A model as a weights file holds it, ours or yolov5's: our yaml mapping, its classes and its tensors. Errors name
    the file (`source`), a yolov5 file's with what of it was read (`yaml_source`, `tensors_source`)."""

    mapping: dict
    names: list[str]
    num_classes: int
    state_dict: dict[str, torch.Tensor]
    source: str
    yaml_source: str
    tensors_source: str
    yolov5: bool = False
    trained: TrainedWith = TrainedWith()
