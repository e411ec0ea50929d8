"""torch.hub entry points (hubconf.py): yolov5's hub models on the Detector, with results shaped as yolov5's.

    model = torch.hub.load("path/to/detect", "custom", path="best.pt", source="local")
    results = model(["photo.jpg", Image.open("other.jpg")], size=640)
    results.print(); results.xyxy[0]; results.save()

Weights come from a path, the working directory, ./weights/ or the repository's weights/; nothing is downloaded.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from PIL import Image, ImageOps
from torch import nn

from detect import backend as backends
from detect import cli
from detect.config import Settings, option
from detect.data.images.load import read_failure, read_image
from detect.data.images.pixels import check_pixels
from detect.errors import UserError
from detect.inference.annotate import annotate
from detect.inference.detector import Detections, Detector, PredictSettings
from detect.inference.sample_images import sample_images
from detect.models import DetectionModel, build_model
from detect.models.safe_io import save_checkpoint
from detect.models.weights import LOOKUP_DIR, load_model, resolve_weights, weights_payload
from detect.ops.boxes import xyxy_to_xywh
from detect.run_dir import make_run_dir

LOGGER = logging.getLogger(__name__)
# yolov5's hubconf.py names (its P5 and P6 families); each has a bundled yaml of that name in configs/models/.
MODEL_NAMES = tuple(f"yolov5{size}{level}" for level in ("", "6") for size in "nsmlx")
XYXY_COLUMNS = ("xmin", "ymin", "xmax", "ymax", "confidence", "class", "name")  # yolov5's pandas() columns
XYWH_COLUMNS = ("xcenter", "ycenter", "width", "height", "confidence", "class", "name")
ImageLike = str | Path | np.ndarray | Image.Image


def find_weights(weights: str | Path, hub_dir: Path | None = None) -> Path:
    """A weights file: a path, or a bare name in the working directory, ./weights/ or hub_dir/weights/; no suffix
    means .pt (yolov5's custom(path='yolov5n')). A missing file is one line naming where to put it."""
    path = Path(weights)
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


def to_bgr(image: ImageLike, index: int) -> tuple[str, np.ndarray]:
    """(file name for save, (h, w, 3) uint8 BGR) of one input. As yolov5's AutoShape: paths and PIL images are read
    with their EXIF rotation; numpy arrays are RGB, HWC or CHW, grey or with alpha."""
    if isinstance(image, (str, Path)):
        if str(image).startswith(("http://", "https://")):
            raise UserError(f"{image}: detect never downloads; save the image and pass its path")
        try:
            check_pixels(image)
            return Path(image).with_suffix(".jpg").name, read_image(Path(image))
        except OSError as error:
            raise UserError(read_failure(image, error)) from None
    if isinstance(image, Image.Image):
        name = Path(getattr(image, "filename", "") or f"image{index}").with_suffix(".jpg").name
        return name, rgb_to_bgr(np.asarray(ImageOps.exif_transpose(image).convert("RGB")))
    if isinstance(image, np.ndarray):
        return f"image{index}.jpg", rgb_to_bgr(image)
    raise UserError(f"cannot read a {type(image).__name__} as an image: give a path, a PIL image, an (h, w, 3) RGB "
                    f"numpy array, or a (B, 3, H, W) tensor")


def rgb_to_bgr(array: np.ndarray) -> np.ndarray:
    """An RGB array (HWC, CHW with under 5 channels, 2-D grey, or with alpha; any numeric dtype, 0-255) as
    contiguous (h, w, 3) uint8 BGR."""
    if array.ndim == 3 and array.shape[0] < 5:  # CHW, as a data loader lays it out
        array = array.transpose(1, 2, 0)
    if array.ndim == 2:
        array = np.repeat(array[..., None], 3, axis=2)
    if array.ndim != 3 or array.shape[2] < 3:
        raise UserError(f"an image array must be (h, w, 3) RGB, got shape {array.shape}")
    if array.dtype != np.uint8:
        array = np.clip(np.rint(array), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(array[..., 2::-1])  # drops an alpha channel, RGB -> BGR


def unique_names(names: list[str]) -> list[str]:
    """The names with a _2, _3 ... suffix on repeats, so that save() writes every image (yolov5 overwrites)."""
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{Path(name).stem}_{seen[name]}{Path(name).suffix}")
    return unique


class HubResults:
    """yolov5's hub results: per image, (n, 6) tensors [x1, y1, x2, y2, confidence, class] on the CPU in four box
    formats (xyxy and xywh in original pixels, xyxyn and xywhn divided by the image's width and height)."""

    def __init__(self, images: list[np.ndarray], found: list[Detections], files: list[str],
                 names: dict[int, str], milliseconds: float) -> None:
        self._images = images  # BGR, as annotate and cv2.imwrite take them
        self._found = found
        self.files, self.names, self.n = unique_names(files), names, len(images)
        self.ims = [image[..., ::-1] for image in images]  # RGB, as yolov5 keeps them
        self.xyxy = [detections.rows for detections in found]
        self.xywh = [torch.cat((xyxy_to_xywh(rows[:, :4]), rows[:, 4:]), dim=1) for rows in self.xyxy]
        scales = [torch.tensor([width, height, width, height, 1, 1], dtype=torch.float32)
                  for height, width in (image.shape[:2] for image in images)]
        self.xyxyn = [rows / scale for rows, scale in zip(self.xyxy, scales)]
        self.xywhn = [rows / scale for rows, scale in zip(self.xywh, scales)]
        self.pred = self.xyxy
        self.milliseconds = milliseconds  # per image: pre-process, inference and NMS together
        height, width = found[0].input_size if found else (0, 0)
        self.s = (self.n, 3, height, width)  # the batch's shape at inference

    def __len__(self) -> int:
        return self.n

    def __str__(self) -> str:
        lines = []
        for index, (image, detections) in enumerate(zip(self._images, self._found), 1):
            counts = ", ".join(f"{count} {name}{'s' * (count > 1)}" for name, count in detections.counts().items())
            lines.append(f"image {index}/{self.n}: {image.shape[0]}x{image.shape[1]} {counts or '(no detections)'}")
        lines.append(f"Speed: {self.milliseconds:.1f}ms per image (pre-process, inference and NMS) at shape {self.s}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"{type(self).__name__}\n{self}"

    def print(self) -> None:
        """Print one line per image (its size and detections per class) and the speed."""
        print(self)

    def save(self, labels: bool = True, save_dir: str | Path = "runs/hub/exp", exist_ok: bool = False) -> Path:
        """Write each image with its boxes drawn to save_dir (or save_dir2, 3 ... when taken); returns the folder."""
        save_dir = Path(save_dir)
        save_dir = make_run_dir(save_dir.parent, save_dir.name, exist_ok)
        for image, detections, name in zip(self._images, self._found, self.files):
            path = save_dir / name
            if not cv2.imwrite(str(path), annotate(image, detections, hide_labels=not labels)):
                raise UserError(f"{path}: cannot write the annotated image")
        LOGGER.info("Saved %d image%s to %s", self.n, "s" * (self.n > 1), save_dir)
        return save_dir

    def pandas(self) -> HubResults:
        """A copy whose xyxy, xyxyn, xywh and xywhn are pandas DataFrames with yolov5's columns (needs pandas)."""
        try:
            import pandas
        except ImportError:
            raise UserError("results.pandas() needs pandas, which detect does not install: pip install pandas") \
                from None
        frames = copy.copy(self)
        for key, columns in (("xyxy", XYXY_COLUMNS), ("xyxyn", XYXY_COLUMNS), ("xywh", XYWH_COLUMNS),
                             ("xywhn", XYWH_COLUMNS)):
            rows = [[[*row[:5], int(row[5]), self.names[int(row[5])]] for row in boxes.tolist()]
                    for boxes in getattr(self, key)]
            setattr(frames, key, [pandas.DataFrame(image_rows, columns=list(columns)) for image_rows in rows])
        return frames


class HubModel(nn.Module):
    """yolov5's AutoShape on a Detector: images (paths, PIL, RGB numpy, or a list of them) give HubResults after NMS;
    a (B, 3, H, W) float tensor in [0, 1] gives the decoded predictions (B, N, 5+nc) as they are, so the model can be
    traced. conf, iou, classes, max_det and agnostic are read at each call, as yolov5's are."""

    conf = PredictSettings.conf_threshold
    iou = PredictSettings.iou_threshold
    classes: Sequence[int] | None = None
    max_det = PredictSettings.max_det
    agnostic = PredictSettings.agnostic

    def __init__(self, detector: Detector) -> None:
        super().__init__()
        self.detector = detector
        network = getattr(detector.model, "model", None)
        if isinstance(network, nn.Module):  # registered, so parameters(), state_dict() and jit.trace see it
            self.model = network
        self.names = dict(enumerate(detector.names))
        self.nc, self.stride = len(self.names), detector.model.stride

    def forward(self, ims: ImageLike | torch.Tensor | Sequence[ImageLike], size: int | Sequence[int] = 640,
                augment: bool = False) -> HubResults | torch.Tensor:
        """Detections of one image or a list of them, their long side resized to `size`; or a tensor's predictions."""
        detector = self.detector
        detector.augment = augment
        if isinstance(ims, torch.Tensor):
            return detector.predict(detector.backend.to_device(ims))
        start = time.perf_counter()
        inputs = list(ims) if isinstance(ims, (list, tuple)) else [ims]
        files, images = zip(*(to_bgr(image, index) for index, image in enumerate(inputs))) if inputs else ((), ())
        side = max(size) if isinstance(size, Sequence) else size  # yolov5 scales by the larger side too
        detector.settings = dataclasses.replace(
            detector.settings, imgsz=(side, side), conf_threshold=self.conf, iou_threshold=self.iou,
            classes=None if self.classes is None else tuple(self.classes), max_det=self.max_det,
            agnostic=self.agnostic)
        found = detector(list(images)) if images else []
        milliseconds = 1000 * (time.perf_counter() - start) / max(len(images), 1)
        return HubResults(list(images), found, list(files), self.names, milliseconds)


def _detector_of(model: DetectionModel, device: str) -> Detector:
    """A Detector on a model in memory (the Detector loads models from files, so through a temporary one)."""
    with tempfile.TemporaryDirectory(prefix="detect-hub-") as folder:
        return Detector(save_checkpoint(Path(folder) / "model.pt", weights_payload(model)), device)


def load(weights: str | Path, *, name: str | None = None, pretrained: bool = True, channels: int = 3,
         classes: int | None = None, autoshape: bool = True, verbose: bool = True,
         device: str | int | torch.device | None = None, hub_dir: Path | None = None) -> HubModel | DetectionModel:
    """What a hub entry returns: the model in `weights` (or, pretrained=False, the bundled yaml `name` untrained with
    `classes` classes, 80 by default) on `device`, as a HubModel, or the plain DetectionModel when not autoshape."""
    if channels != 3:
        raise UserError(f"channels={channels}: detect's models take 3-channel (colour) images")
    spec = device_spec(device)
    if not pretrained:
        if name is None:
            raise UserError("pretrained=False builds a named model (yolov5n ... yolov5x6) untrained; "
                            "custom() loads trained weights")
        model = build_model(f"{name}.yaml", num_classes=80 if classes is None else classes)
        if not autoshape:
            return model.eval().to(backends.select(spec, amp=False).device)
        detector = _detector_of(model, spec)
    else:
        path = find_weights(weights, hub_dir)
        if not autoshape:
            if path.suffix.lower() == ".onnx":
                raise UserError(f"{path}: autoshape=False returns a PyTorch model; an .onnx loads with autoshape")
            return load_model(path).to(backends.select(spec, amp=False).device)
        detector = Detector(path, spec)
        if classes is not None and classes != len(detector.names):
            raise UserError(f"{path} has {len(detector.names)} classes, not classes={classes}: leave classes out, "
                            f"or pass pretrained=False for an untrained model with {classes}")
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
                     f"pretrained=False: untrained, from the bundled {name}.yaml with `classes` classes")
    return entry


def custom_entry(hub_dir: Path | None = None) -> Callable[..., nn.Module]:
    """hubconf.py's `custom`: any checkpoint of ours, a yolov5 .pt, or an exported .onnx."""
    def custom(path: str | Path = "path/to/model.pt", autoshape: bool = True, _verbose: bool = True,
               device: str | int | torch.device | None = None) -> nn.Module:
        """The model in `path` (ours, a yolov5 .pt, or an .onnx); a bare name is looked up as for --weights."""
        return load(path, autoshape=autoshape, verbose=_verbose, device=device, hub_dir=hub_dir)

    return custom


def sample_inputs() -> list[Any]:
    """The bundled samples in each form a hub model takes: a path string, a Path, RGB numpy, PIL, and a blank."""
    paths = sample_images()
    return [str(paths[0]), paths[1], cv2.imread(str(paths[2]))[..., ::-1], Image.open(paths[0]),
            np.zeros((320, 640, 3))]


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
