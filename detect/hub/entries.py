"""hubconf.py's entries: `custom` and the named models (yolov5n ... yolov5x6) with yolov5's keywords, and the
script body of `python hubconf.py`. Weights come from a path, the working directory, ./weights/ or the repository's
weights/; nothing is downloaded, and every file is read by the safe loaders (detect/models/safe_io.py)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from detect import backend as backends
from detect import cli
from detect.backend.openvino_runtime import FOLDER_SUFFIX
from detect.config import Settings, option
from detect.errors import UserError
from detect.hub.images import sample_inputs
from detect.hub.model import HubModel
from detect.inference.detector import Detector
from detect.inference.model import FORMATS, PYTORCH, format_of
from detect.models import DetectionModel, build_model
from detect.models.weights import LOOKUP_DIR, load_model, resolve_weights

LOGGER = logging.getLogger(__name__)
# yolov5's hubconf.py names (its P5 and P6 families); each has a bundled yaml of that name in configs/models/.
MODEL_NAMES = tuple(f"yolov5{size}{level}" for level in ("", "6") for size in "nsmlx")
EXPORT_SUFFIXES = sorted(kind.suffix for kind in FORMATS if kind.runtime is not None and kind is not PYTORCH)
EXPORT_KINDS = f"{', '.join(EXPORT_SUFFIXES)} or an OpenVINO <stem>{FOLDER_SUFFIX} folder"


def find_weights(weights: str | Path, hub_dir: Path | None = None) -> Path:
    """A weights file or an OpenVINO export's folder: a path, or a bare name in the working directory, ./weights/
    or hub_dir/weights/; no suffix means .pt (yolov5's custom(path='yolov5n')). A missing file is one line naming
    where to put it."""
    path = Path(weights)
    if path.is_dir():
        if not is_export(path):
            raise UserError(f"{path} is a folder: give a .pt, {EXPORT_KINDS}")
        return path
    path = path if path.suffix else path.with_suffix(".pt")
    try:
        return resolve_weights(path)
    except UserError:
        if hub_dir is not None and len(path.parts) == 1 and (hub_dir / "weights" / path).is_file():
            return hub_dir / "weights" / path
    places = [str(LOOKUP_DIR.resolve())] + ([str(hub_dir / "weights")] if hub_dir is not None else [])
    raise UserError(f"weights not found: {path} (nothing is downloaded: give a path, or put the file in "
                    f"{' or '.join(dict.fromkeys(places))})")


def device_spec(device: str | int | torch.device | None) -> str:
    """yolov5's device argument as a backend spec: None is auto, 0 the first accelerator, torch.device its name."""
    return "auto" if device is None or device == "" else str(device)


def is_export(path: Path) -> bool:
    """Whether `path` is an export (run by its runtime), not a PyTorch checkpoint."""
    return format_of(path) is not PYTORCH


def transfer_weights(source: DetectionModel, target: DetectionModel) -> int:
    """Copy into `target` every tensor of `source` with the same name and shape, anchors left out (yolov5's
    intersect_dicts: the yaml's anchors stay); returns how many were copied."""
    target_state = target.state_dict()
    fitting = {name: tensor for name, tensor in source.state_dict().items()
               if not name.endswith(".anchors") and name in target_state and tensor.shape == target_state[name].shape}
    target.load_state_dict(fitting, strict=False)
    return len(fitting)


def pretrained_with_classes(name: str, path: Path, classes: int, verbose: bool) -> DetectionModel:
    """yolov5's `yolov5s(classes=10)`: the model in `path` when it has `classes` classes, else the bundled yaml `name`
    with `classes` classes holding every weight of `path` whose shape fits (all but the Detect head's output layers
    when only the class count differs), its names '0', '1', ... as yolov5's."""
    source = load_model(path)
    if len(source.names) == classes:
        return source
    model = build_model(f"{name}.yaml", num_classes=classes)
    copied = transfer_weights(source, model)
    if verbose:  # printed, not logged: a hub user sees it without configuring logging, as yolov5's
        print(f"Transferred {copied}/{len(model.state_dict())} tensors from {path} to {name} with {classes} classes")
    return model.eval()


# Nine parameters on purpose: yolov5's hubconf keywords (pretrained, channels, classes, autoshape, verbose, device),
# which torch.hub.load passes through as the user wrote them; a settings object would only rename them.
def load(weights: str | Path, *, name: str | None = None, pretrained: bool = True, channels: int = 3,
         classes: int | None = None, autoshape: bool = True, verbose: bool = True,
         device: str | int | torch.device | None = None, hub_dir: Path | None = None) -> HubModel | DetectionModel:
    """What a hub entry returns: the model in `weights` (a checkpoint or an export), or the bundled yaml `name` with
    `classes` classes (pretrained: holding the weights of `weights` that fit; else untrained), on `device`, as a
    HubModel, or the plain DetectionModel when not autoshape."""
    if channels != 3:
        raise UserError(f"channels={channels}: detect's models take 3-channel (colour) images")
    spec = device_spec(device)
    path = find_weights(weights, hub_dir) if pretrained else None
    if path is not None and is_export(path):
        if not autoshape:
            raise UserError(f"{path}: autoshape=False returns a PyTorch model; an export loads with autoshape")
        detector = Detector(path, spec)
    elif path is not None and (classes is None or name is None):
        if not autoshape:
            return load_model(path).to(backends.select(spec, amp=False).device)
        detector = Detector(path, spec)
    else:
        if name is None:
            raise UserError("pretrained=False builds a named model (yolov5n ... yolov5x6) untrained; "
                            "custom() loads trained weights")
        model = (build_model(f"{name}.yaml", num_classes=80 if classes is None else classes) if path is None
                 else pretrained_with_classes(name, path, classes, verbose))
        if not autoshape:
            return model.eval().to(backends.select(spec, amp=False).device)
        detector = Detector(model, spec)
    if verbose:
        LOGGER.info("%s: %d classes on %s", name or weights, len(detector.names), detector.backend.device)
    return HubModel(detector)


def named_entry(name: str, hub_dir: Path | None = None) -> Callable[..., nn.Module]:
    """hubconf.py's `name` (yolov5n ... yolov5x6): its weights from <name>.pt, yolov5's keywords."""
    def entry(pretrained: bool = True, channels: int = 3, classes: int | None = None, autoshape: bool = True,
              _verbose: bool = True, device: str | int | torch.device | None = None) -> nn.Module:
        return load(f"{name}.pt", name=name, pretrained=pretrained, channels=channels, classes=classes,
                    autoshape=autoshape, verbose=_verbose, device=device, hub_dir=hub_dir)

    entry.__name__ = entry.__qualname__ = name
    entry.__doc__ = (f"{name} from {name}.pt (the working directory, ./weights/ or the repository's weights/); "
                     f"classes=N: the bundled {name}.yaml with N classes and the weights that fit; pretrained=False: "
                     f"untrained")
    return entry


def custom_entry(hub_dir: Path | None = None) -> Callable[..., nn.Module]:
    """hubconf.py's `custom`: any checkpoint of ours, a yolov5 .pt, or an export that val and predict read."""
    def custom(path: str | Path = "path/to/model.pt", autoshape: bool = True, _verbose: bool = True,
               device: str | int | torch.device | None = None) -> nn.Module:
        """The model in `path`: ours, a yolov5 .pt, an export (.torchscript, .onnx, .om, an OpenVINO .xml or its
        <stem>_openvino_model folder); a bare name is looked up as for --weights."""
        return load(path, autoshape=autoshape, verbose=_verbose, device=device, hub_dir=hub_dir)

    return custom


@dataclasses.dataclass(frozen=True)
class HubSettings(Settings):
    """`python hubconf.py --model yolov5n`, as yolov5's CI runs it: predict on the sample images, print, save."""

    model: str = option("yolov5s", "yolov5n ... yolov5x6 (from <name>.pt), or a weights path")


parse_args = cli.settings_reader(HubSettings, "python hubconf.py", HubSettings.__doc__)


def main(argv: list[str] | None = None, hub_dir: Path | None = None) -> int:
    """The script body of hubconf.py; `hub_dir` is the repository whose weights/ is searched too."""
    def demo(settings: HubSettings) -> None:
        name = settings.model
        model = named_entry(name, hub_dir)() if name in MODEL_NAMES else custom_entry(hub_dir)(name)
        results = model(sample_inputs(), size=320)
        results.print()
        results.save()

    return cli.main_for(parse_args, demo)(argv)
