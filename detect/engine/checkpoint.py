"""Our own checkpoints: tensors and plain values only, written atomically, read with weights_only=True."""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

from detect.errors import UserError


def _refuse_modules(value: Any, key: str) -> None:
    """Raise TypeError if an nn.Module (or optimizer) hides anywhere in the payload: store state dicts instead."""
    if isinstance(value, (torch.nn.Module, torch.optim.Optimizer)):
        raise TypeError(f"checkpoint entry {key!r} is a {type(value).__name__}; save its state_dict() instead")
    if isinstance(value, dict):
        for inner_key, inner in value.items():
            _refuse_modules(inner, f"{key}.{inner_key}")
    elif isinstance(value, (list, tuple)):
        for index, inner in enumerate(value):
            _refuse_modules(inner, f"{key}[{index}]")


def save_checkpoint(path: Path | str, payload: dict) -> Path:
    """Write payload to path atomically: a temp file in the same folder, fsync, then os.replace."""
    path = Path(path)
    for key, value in payload.items():
        _refuse_modules(value, str(key))
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            torch.save(payload, file)
            file.flush()
            os.fsync(file.fileno())
        # os.replace is atomic on one filesystem: readers see the old file or the new one, never half of one.
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(path: Path | str) -> dict:
    """Read a checkpoint written by save_checkpoint onto the CPU; anything else is a UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path} (give a .pt file written by detect)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # weights_only refuses a class with "Unsupported global: GLOBAL module.Name"; other errors mean garbage.
        if "global" not in str(error).lower():
            raise UserError(f"{path} is not a readable checkpoint ({error})") from None
        raise UserError(
            f"{path} is not a detect checkpoint: it holds objects other than tensors and plain values "
            f"(a yolov5 .pt? pass it as --weights, which imports those safely) [{str(error).splitlines()[0]}]"
        ) from None
    except (RuntimeError, EOFError, ValueError, OSError, IndexError, KeyError, TypeError, AttributeError,
            zipfile.BadZipFile) as error:  # fmt: skip
        raise UserError(f"{path} is not a readable checkpoint ({type(error).__name__}: {error})") from None
    if not isinstance(payload, dict):
        raise UserError(f"{path} is not a detect checkpoint (it holds a {type(payload).__name__}, not a dict)")
    return payload
