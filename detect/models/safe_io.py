"""Checkpoint files, read and written safely. Ours hold tensors and plain values only, are written atomically and
read with weights_only=True; a yolov5 .pt goes to the restricted unpickler (yolov5_pickle.py). Every reader refuses
TorchScript first, and a weights file of either kind is read once into one stored form (read_stored_model)."""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

import torch

from detect.atomic_file import replacing
from detect.errors import UserError
from detect.models.stored import StoredModel, TrainedWith
from detect.models.yolov5_pickle import YOLOV5_TASKS, YoloV5Checkpoint, known_global, other_task, read_yolov5_pickle
from detect.models.yolov5_yaml import mapping_from_yolov5

# Every checkpoint of ours holds its model under these keys (model_state each); the EMA's is the one to use.
MODEL_KEY, EMA_KEY = "model", "ema"
# A model state's record of the training that made it (TrainedWith): the size val, predict, serve and export default to.
TRAINED_KEY = "trained"


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
    """Write payload to path atomically (atomic_file.replacing), fsync'ed before the rename. The file's mode
    follows the umask, as any file the user writes; a full disk is a UserError and leaves the previous file whole."""
    path = Path(path)
    for key, value in payload.items():
        _refuse_modules(value, str(key))
    try:
        # os.open applies the umask to 0o666 (mkstemp would make it 0600 whatever the umask).
        with replacing(path) as temporary, os.fdopen(
                os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as file:
            torch.save(payload, file)
            file.flush()
            os.fsync(file.fileno())
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _disk_full(path, payload) from None
        raise
    return path


def _disk_full(path: Path, payload: dict) -> UserError:
    """The one line for a checkpoint that did not fit on its disk: the folder, about what it needs and has."""
    needed = _tensor_bytes(payload)
    free = shutil.disk_usage(path.parent).free
    kept = f"the previous {path.name} is unchanged" if path.is_file() else f"no {path.name} was written"
    return UserError(f"no space left in {path.parent} for {path.name}: it needs about {needed / 2**20:.1f} MB, "
                     f"{free / 2**20:.1f} MB are free; {kept} (free some space, then resume)")


def _tensor_bytes(value: Any) -> int:
    """The bytes of the tensors in a payload: what its file takes, within the pickle's few kB."""
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, dict):
        return sum(_tensor_bytes(inner) for inner in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(inner) for inner in value)
    return 0


ZIP_MAGIC = b"PK\x03\x04"  # the first bytes by which torch.load takes a file for a zip archive (_is_zipfile)


def refuse_torchscript(path: Path) -> None:
    """Raise UserError if `path` is a TorchScript archive: torch.load hands one to torch.jit.load, which runs the
    code in it (a scripted __setstate__) before a reader could look at what it returned."""
    with path.open("rb") as file:
        if file.read(len(ZIP_MAGIC)) != ZIP_MAGIC:
            return  # torch.load reads it as a legacy pickle, never as TorchScript
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
        raise UserError(f"{path} is not a readable checkpoint (a damaged zip archive: {error})") from None
    # torch.load's own test (serialization._is_torchscript_zip): a constants.pkl record, which torch.jit.save
    # writes and torch.save never does. Looked for at any depth, so the test is never narrower than torch's.
    if any(PurePosixPath(entry).name == "constants.pkl" for entry in entries):
        raise UserError(f"{path} is a TorchScript program, not a checkpoint: TorchScript is code that runs "
                        "when it loads, so detect never reads weights from it (give the .pt checkpoint it was exported "
                        "from; load TorchScript with torch.jit.load only from a source you trust)")


def foreign_globals(path: Path | str) -> list[str] | None:
    """What a torch zip file's pickle names that weights_only loading refuses ([] for ours); None if not a zip."""
    try:
        # Reads the pickle's opcodes with pickletools and runs none of them.
        return torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001 - a file that is not a torch zip can fail any way; it is then not ours
        return None


def _refusal(path: Path, refused: list[str]) -> UserError:
    """The one line for a pickle that names globals weights_only loading refuses ('module.name' strings)."""
    names = sorted({".".join(known_global(*name.rsplit(".", 1))) for name in refused})
    task = next((source for source in YOLOV5_TASKS if source in names), None)
    if task is not None:
        return other_task(path, task)
    listed = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    hint = " (a yolov5 .pt? give it as --weights)" if any(name.startswith("models.") for name in names) else ""
    return UserError(f"{path} is not a detect checkpoint: its pickle asks for {listed}, which is refused{hint}")


def load_checkpoint(path: Path | str) -> dict:
    """Read a checkpoint written by save_checkpoint onto the CPU; anything else is a UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path} (give a .pt file written by detect)")
    refuse_torchscript(path)
    refused = foreign_globals(path)
    if refused is None:
        raise UserError(f"{path} is not a readable checkpoint (not a zip file written by torch.save)")
    if refused:
        raise _refusal(path, refused)
    return _load_weights_only(path)


def _load_weights_only(path: Path) -> dict:
    """torch.load with weights_only=True of a file that names nothing it refuses; any failure is one UserError line."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # torch's message is a paragraph on weights_only; one line says what matters
        raise UserError(f"{path} is not a readable checkpoint (weights_only loading cannot read its pickle)") from None
    except (RuntimeError, EOFError, ValueError, OSError, IndexError, KeyError, TypeError, AttributeError,
            zipfile.BadZipFile) as error:
        raise UserError(f"{path} is not a readable checkpoint ({type(error).__name__}: {error})") from None
    if not isinstance(payload, dict):
        raise UserError(f"{path} is not a detect checkpoint (it holds a {type(payload).__name__}, not a dict)")
    return payload


def read_yolov5_checkpoint(path: Path | str) -> YoloV5Checkpoint:
    """Read a yolov5 checkpoint's state dict, names, yaml and stride ('ema' weights when present); anything its pickle
    names beyond tensors, plain values and inert placeholders of yolov5's classes is refused."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path} (give the path of a yolov5 .pt file)")
    refuse_torchscript(path)
    return read_yolov5_pickle(path)


def stored_state(state: dict, source: str) -> StoredModel:
    """Our model_state (weights.py) as a StoredModel; errors name `source`."""
    names = list(state["names"])
    trained = TrainedWith.read(state[TRAINED_KEY], source) if state.get(TRAINED_KEY) is not None else TrainedWith()
    return StoredModel(state["config"], names, len(names), state["state_dict"], source, source, source,
                       trained=trained)


def read_stored_model(path: Path) -> StoredModel:
    """The model in a weights file: the EMA's (else the model's) of a checkpoint of ours, or a yolov5 .pt's, its yaml
    translated to ours with the anchors it holds. A file whose pickle names something weights_only loading refuses is
    not ours: it goes to the yolov5 reader, which resolves no foreign code (e.g. os.system is refused naming it)."""
    refuse_torchscript(path)
    if foreign_globals(path) == []:
        checkpoint = _load_weights_only(path)
        state = checkpoint.get(EMA_KEY) or checkpoint.get(MODEL_KEY)
        if not isinstance(state, dict) or "config" not in state:
            raise UserError(f"{path}: a checkpoint without a model in it")
        return stored_state(state, str(path))
    checkpoint = read_yolov5_pickle(path)  # (a file, not TorchScript: checked above)
    anchors, state_dict = checkpoint.pixel_anchors(), checkpoint.fp32_state_dict()
    yaml_source = f"{path} (yolov5 yaml)"
    mapping = mapping_from_yolov5(checkpoint.yaml, yaml_source, anchors, checkpoint.csp_activation)
    return StoredModel(mapping, list(checkpoint.names), checkpoint.nc, state_dict, str(path), yaml_source,
                       f"{path} (yolov5)", yolov5=True, trained=checkpoint.trained)
