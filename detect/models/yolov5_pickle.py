"""Read an ultralytics/yolov5 .pt checkpoint without running any of the code its pickle names (safe_io opens the
file: it refuses TorchScript first), and name what a pickle asks for as a user knows it."""

from __future__ import annotations

import _compat_pickle  # pickle's own table of the Python 2 names that protocol 2 writes
import dataclasses
import logging
import pickle
from collections import OrderedDict
from pathlib import Path, PurePosixPath, PureWindowsPath
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from detect.config import IMAGE_SIZE
from detect.errors import UserError, short_repr
from detect.models.stored import TrainedWith

logger = logging.getLogger(__name__)

# os's functions are pickled under the platform module that defines them: os.system is posix.system or nt.system.
OS_MODULES = ("posix", "nt")
# The model classes of yolov5's other tasks (segment/ and classify/ train.py, v7.0 on), then their heads.
YOLOV5_TASKS = {"models.yolo.SegmentationModel": "segmentation", "models.yolo.ClassificationModel": "classification",
                "models.yolo.Segment": "segmentation", "models.common.Classify": "classification"}


def known_global(module: str, name: str) -> tuple[str, str]:
    """A pickled global as a user knows it: protocol 2 writes Python 2's names (__builtin__.eval, commands.Popen),
    mapped back as pickle maps them (builtins.eval, subprocess.Popen); posix.system and nt.system are os.system."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    return ("os" if module in OS_MODULES else module), name


def other_task(path: Path, source: str) -> UserError:
    """The one line for a yolov5 checkpoint of another task than detection; `source` is a class in YOLOV5_TASKS."""
    return UserError(f"{path} is a yolov5 {YOLOV5_TASKS[source]} checkpoint ({source}): detect loads detection "
                     "checkpoints only")


# Module prefixes whose classes become inert placeholders: yolov5's own code and torch.nn modules.
PLACEHOLDER_PREFIXES = ("models.", "utils.", "torch.nn.modules.")
# Functions torch's zip format uses to rebuild tensors; they only build tensors from storages.
TENSOR_REBUILDERS = {
    ("torch._utils", "_rebuild_tensor"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_parameter_with_state"),
}
PLAIN_GLOBALS = {
    ("collections", "OrderedDict"): OrderedDict,
    ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "slice"): slice,
    ("torch", "Size"): torch.Size,
}
# Paths in yolov5's `opt` (PosixPath, or WindowsPath from a Windows run) come back as plain strings.
PATH_CLASSES = {"PosixPath": PurePosixPath, "PurePosixPath": PurePosixPath,
                "WindowsPath": PureWindowsPath, "PureWindowsPath": PureWindowsPath}
PATH_MODULES = ("pathlib", "pathlib._local")  # Python 3.13 pickles pathlib._local.PosixPath
# numpy's own rebuilders (best_fitness is an ndarray, some values are numpy scalars), found by asking numpy how it
# pickles rather than by name: numpy 1.x writes numpy.core.multiarray, numpy 2 numpy._core.multiarray.
_RECONSTRUCT, _SCALAR = np.ndarray.__reduce__(np.zeros(1))[0], np.float64(0).__reduce__()[0]
NUMPY_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT, ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy.core.multiarray", "scalar"): _SCALAR, ("numpy._core.multiarray", "scalar"): _SCALAR,
}


def path_string(class_name: str):
    """The rebuilder of a pickled pathlib class: its parts joined into a str, in that path flavour's syntax."""
    flavour = PATH_CLASSES[class_name]
    return lambda *parts: str(flavour(*parts))


def latin1_bytes(text: str, encoding: str) -> bytes:
    """_codecs.encode as pickle protocol 2 uses it to spell bytes (numpy's raw data); no other codec runs."""
    if encoding != "latin1" or not isinstance(text, str):
        raise UserError("refused to load: the checkpoint's pickle asks for _codecs.encode with "
                        f"{short_repr(encoding)}, which is not allowed")
    return text.encode("latin1")


class Placeholder:
    """Stands in for a pickled class: keeps the object's state and does nothing else."""

    source = "?"

    def __setstate__(self, state: Any) -> None:
        """Store the pickled state; a dict becomes attributes, anything else is kept as `state`."""
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.__dict__["state"] = state

    def __repr__(self) -> str:
        return f"<placeholder for {self.source}>"


class OtherTask(UserError):
    """The pickle names a class of yolov5's segmentation or classification models (YOLOV5_TASKS)."""

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self.source = source


class RestrictedUnpickler(pickle.Unpickler):
    """Resolves only tensor rebuilders, plain containers, numpy arrays and scalars, paths (as str) and placeholder
    classes; refuses everything else."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.placeholders: dict[str, type] = {}

    def find_class(self, module: str, name: str) -> Any:
        """Map a pickled global (named as Python 3 does: known_global) to a safe object, or raise UserError naming it."""
        module, name = known_global(module, name)
        if (module, name) in TENSOR_REBUILDERS:
            return getattr(torch._utils, name)
        if (module, name) in PLAIN_GLOBALS:
            return PLAIN_GLOBALS[(module, name)]
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if (module, name) in NUMPY_GLOBALS:
            return NUMPY_GLOBALS[(module, name)]
        if module in PATH_MODULES and name in PATH_CLASSES:
            return path_string(name)
        if (module, name) == ("_codecs", "encode"):
            return latin1_bytes
        if module.startswith(PLACEHOLDER_PREFIXES) and name.isidentifier() and name[0].isupper():
            source = f"{module}.{name}"
            if source in YOLOV5_TASKS:
                raise OtherTask(source)
            if source not in self.placeholders:
                self.placeholders[source] = type(name, (Placeholder,), {"source": source})
            return self.placeholders[source]
        raise UserError(f"refused to load: the checkpoint's pickle asks for {module}.{name}, which is not allowed")


def _restricted_load(file: Any, **kwargs: Any) -> Any:
    """pickle.load through RestrictedUnpickler (torch.load's legacy format calls pickle_module.load)."""
    return RestrictedUnpickler(file, **kwargs).load()


# What torch.load needs from a pickle_module.
RESTRICTED_PICKLE = SimpleNamespace(Unpickler=RestrictedUnpickler, load=_restricted_load, __name__="restricted_pickle")


@dataclasses.dataclass(frozen=True)
class YoloV5Checkpoint:
    """Tensors and plain values of a yolov5 checkpoint; tensors keep their stored dtype (fp16 for releases)."""

    state_dict: dict[str, torch.Tensor]  # model.0.conv.weight ... model.24.m.2.bias, as nn.Module.state_dict names
    names: list[str]
    yaml: dict  # the model yaml: depth_multiple, width_multiple, nc, anchors, backbone, head
    stride: list[float]
    nc: int
    csp_activation: str = "silu"  # of its BottleneckCSP blocks: leaky_relu up to yolov5 v6.0 (layers.ACTIVATIONS)
    trained: TrainedWith = dataclasses.field(default_factory=TrainedWith)  # its "opt" (none in release weights)

    def pixel_anchors(self) -> list[list[float]]:
        """Its Detect's anchors (AutoAnchor's, stored in strides) in pixels, one row per level."""
        anchors = self.state_dict[next(key for key in self.state_dict if key.endswith(".anchors"))]
        strides = torch.tensor(self.stride, dtype=torch.float32).view(-1, 1, 1)
        return (anchors.float() * strides).view(anchors.shape[0], -1).tolist()

    def fp32_state_dict(self) -> dict[str, torch.Tensor]:
        """Its tensors as our model loads them: floats in fp32. v5.0's Detect also stores anchor_grid, the anchors in
        pixels: derived from anchors and strides, so not kept."""
        return {name: tensor.float() if tensor.is_floating_point() else tensor
                for name, tensor in self.state_dict.items() if not name.endswith(".anchor_grid")}


# The fields yolov5's train.py and strip_optimizer write, v5.0 to master; only 'ema' or 'model' is read.
KNOWN_FIELDS = {"model", "ema", "epoch", "best_fitness", "updates", "optimizer", "opt", "git", "date", "wandb_id",
                "training_results"}


def module_state_dict(module: Placeholder, prefix: str = "") -> dict[str, torch.Tensor]:
    """State dict of a placeholder module tree, in nn.Module.state_dict order (params, buffers, children)."""
    state: dict[str, torch.Tensor] = {}
    non_persistent = set(getattr(module, "_non_persistent_buffers_set", ()))
    for name, value in getattr(module, "_parameters", {}).items():
        if value is not None:
            state[prefix + name] = value.detach()
    for name, value in getattr(module, "_buffers", {}).items():
        if value is not None and name not in non_persistent:
            state[prefix + name] = value.detach()
    for name, child in getattr(module, "_modules", {}).items():
        if child is not None:
            state.update(module_state_dict(child, f"{prefix}{name}."))
    return state


def _load_pickle(path: Path) -> Any:
    """torch.load through the restricted unpickler; any failure becomes one UserError line."""
    try:
        # weights_only=False is safe here only because RESTRICTED_PICKLE resolves no foreign globals and the file is
        # not TorchScript, which torch.load would hand to torch.jit.load.
        return torch.load(path, map_location="cpu", pickle_module=RESTRICTED_PICKLE, weights_only=False)
    except OtherTask as error:
        raise other_task(path, error.source) from None
    except UserError as error:
        raise UserError(f"{path}: {error}") from None
    except Exception as error:  # noqa: BLE001 - a corrupt file can fail any way (OverflowError, MemoryError, ...)
        raise UserError(f"{path} is not a readable PyTorch checkpoint ({type(error).__name__}: {error})") from None


def _note_fields(payload: dict, path: Path) -> None:
    """One info line for fields yolov5 never writes (ignored), one for an optimizer state (not carried over)."""
    unknown = sorted(str(key) for key in payload if key not in KNOWN_FIELDS)
    if unknown:
        logger.info("%s: ignored fields yolov5's train.py does not write: %s", path, ", ".join(unknown))
    if payload.get("optimizer") is not None:
        logger.info("%s holds yolov5's optimizer state (epoch %s), in yolov5's layout: it is not carried over, "
                    "training from these weights starts a fresh optimizer", path, payload.get("epoch"))


def _csp_activation(model: Placeholder) -> str:
    """The activation a yolov5 model's BottleneckCSP blocks use, read from the pickled module classes."""
    layers = getattr(getattr(model, "_modules", {}).get("model"), "_modules", {})
    for layer in layers.values():
        if isinstance(layer, Placeholder) and layer.source.endswith(".BottleneckCSP"):
            activation = getattr(layer, "_modules", {}).get("act")
            leaky = isinstance(activation, Placeholder) and activation.source.endswith(".LeakyReLU")
            return "leaky_relu" if leaky else "silu"
    return "silu"


def _trained_with(opt: Any) -> TrainedWith:
    """The --imgsz and --data in a checkpoint's 'opt', the flags yolov5's train.py ran with (a dict, v6.2 on; none in
    its release weights); a value of another type reads as not recorded."""
    opt = opt if isinstance(opt, dict) else {}
    imgsz, data = opt.get("imgsz"), opt.get("data")
    return TrainedWith(imgsz if type(imgsz) is int and IMAGE_SIZE.accept(imgsz) else None,
                       data if isinstance(data, str) else None)


def _names_list(names: Any) -> list[str]:
    """Class names from a list or an {index: name} dict (newer yolov5 releases)."""
    if isinstance(names, dict):
        return [str(names[key]) for key in sorted(names)]
    return [str(name) for name in names]


def read_yolov5_pickle(path: Path) -> YoloV5Checkpoint:
    """A yolov5 checkpoint's state dict, names, yaml and stride ('ema' weights when present), from a file that is not
    TorchScript (torch.load would run it: safe_io refuses it first, in read_stored_model and read_yolov5_checkpoint)."""
    payload = _load_pickle(path)
    if not isinstance(payload, dict):
        raise UserError(f"{path} is not a yolov5 checkpoint (its pickle holds a {type(payload).__name__}, not a dict)")
    model = payload.get("ema") if payload.get("ema") is not None else payload.get("model")
    if not isinstance(model, Placeholder) or not model.source.startswith("models."):
        raise UserError(f"{path} is not a yolov5 checkpoint (no 'model' or 'ema' entry holding a yolov5 model)")
    _note_fields(payload, path)
    state_dict = module_state_dict(model)
    names = _names_list(getattr(model, "names", []))
    yaml = getattr(model, "yaml", None)
    if not isinstance(yaml, dict) or not state_dict:
        raise UserError(f"{path} is not a yolov5 checkpoint (the model has no yaml dict or no tensors)")
    stride = getattr(model, "stride", None)
    stride_list = [float(s) for s in stride.tolist()] if isinstance(stride, torch.Tensor) else list(stride or [])
    num_classes = int(yaml.get("nc", len(names)))
    if names and len(names) != num_classes:
        raise UserError(f"{path}: {len(names)} class names but nc={num_classes} in its yaml")
    logger.debug("read %d tensors from %s (%s)", len(state_dict), path, model.source)
    return YoloV5Checkpoint(state_dict=state_dict, names=names, yaml=dict(yaml), stride=stride_list, nc=num_classes,
                            csp_activation=_csp_activation(model), trained=_trained_with(payload.get("opt")))
