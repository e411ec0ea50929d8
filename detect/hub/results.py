"""yolov5's hub results (its `Detections`): boxes in four formats, print, show, save, crop, render, pandas, tolist."""

from __future__ import annotations

import copy
import logging
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from detect.atomic_file import write_image
from detect.errors import UserError
from detect.hub.images import unique_names
from detect.inference.annotate import annotate
from detect.inference.detector import Detections
from detect.inference.predict_outputs import crop_box
from detect.ops.boxes import xyxy_to_xywh
from detect.run_dir import make_run_dir, safe_name, safe_names

LOGGER = logging.getLogger(__name__)
XYXY_COLUMNS = ("xmin", "ymin", "xmax", "ymax", "confidence", "class", "name")  # yolov5's pandas() columns
XYWH_COLUMNS = ("xcenter", "ycenter", "width", "height", "confidence", "class", "name")
SAVE_DIR = "runs/hub/exp"  # yolov5: runs/detect/exp, which is our predict CLI's folder's sibling


def display_problem() -> str | None:
    """Why PIL's Image.show (yolov5's show) would show nothing here, or None; a notebook displays inline."""
    if "ipykernel" in sys.modules:
        return None
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no display (DISPLAY is not set)"
    return None


class HubResults:
    """yolov5's hub results: per image, (n, 6) tensors [x1, y1, x2, y2, confidence, class] on the CPU in four box
    formats (xyxy and xywh in original pixels, xyxyn and xywhn divided by the image's width and height)."""

    def __init__(self, images: list[np.ndarray], found: list[Detections], files: list[str],
                 names: dict[int, str], milliseconds: float) -> None:
        self._images = images  # BGR, as annotate and cv2.imwrite take them; never drawn on
        self._found = found
        # A PIL image's filename may hold anything: made safe, its file stays inside save()'s and crop()'s folder.
        self.files = unique_names([safe_name(name, "image.jpg") for name in files])
        self.names, self.n = names, len(images)
        self.ims = [image[..., ::-1] for image in images]  # RGB, as yolov5 keeps them (render() draws on them)
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

    def _drawn(self, labels: bool) -> list[np.ndarray]:
        """Each image (BGR) with its boxes drawn, and their class and score unless not labels."""
        return [annotate(image, detections, hide_labels=not labels)
                for image, detections in zip(self._images, self._found)]

    def save(self, labels: bool = True, save_dir: str | Path = SAVE_DIR, exist_ok: bool = False) -> Path:
        """Write each image with its boxes drawn to save_dir (or save_dir2, 3 ... when taken); returns the folder."""
        save_dir = Path(save_dir)
        save_dir = make_run_dir(save_dir.parent, save_dir.name, exist_ok)
        for drawn, name in zip(self._drawn(labels), self.files):
            path = save_dir / name
            if not write_image(path, drawn):
                raise UserError(f"{path}: cannot write the annotated image")
        LOGGER.info("Saved %d image%s to %s", self.n, "s" * (self.n > 1), save_dir)
        return save_dir

    def show(self, labels: bool = True) -> None:
        """Show each image with its boxes (inline in a notebook, else PIL's viewer, as yolov5); where nothing can be
        shown, save them (as save()) and say where, in one line."""
        problem = display_problem()
        if problem is not None:
            save_dir = self.save(labels)
            LOGGER.warning("results.show(): %s, so the %d image%s went to %s instead", problem, self.n,
                           "s" * (self.n > 1), save_dir)
            return
        for drawn, name in zip(self._drawn(labels), self.files):
            image = Image.fromarray(drawn[..., ::-1])
            if "ipykernel" in sys.modules:
                from IPython.display import display

                display(image)
            else:
                image.show(name)

    def render(self, labels: bool = True) -> list[np.ndarray]:
        """`ims` with the boxes drawn on them (drawn afresh each call), as (h, w, 3) uint8 RGB arrays; returns it."""
        self.ims = [np.ascontiguousarray(drawn[..., ::-1]) for drawn in self._drawn(labels)]
        return self.ims

    def crop(self, save: bool = True, save_dir: str | Path = SAVE_DIR, exist_ok: bool = False) -> list[dict[str, Any]]:
        """Each detection cut out as yolov5's crops are (1.02 x the box + 10 px): dicts of box (4 tensors, xyxy
        pixels), conf, cls, label and im (the crop, BGR as yolov5's); with save, written to
        save_dir/crops/<class name, made safe>/<image name>, then <stem>2.jpg, ... in yolov5's order."""
        folder = make_run_dir(Path(save_dir).parent, Path(save_dir).name, exist_ok) if save else None
        class_folders = safe_names([self.names[index] for index in range(len(self.names))])
        crops = []
        for image, rows, name in zip(self._images, self.xyxy, self.files):
            for *box, conf, cls in reversed(rows):  # lowest confidence first, as yolov5 iterates
                left, top, right, bottom = crop_box([float(side) for side in box], *image.shape[:2])
                crop = image[top:bottom, left:right]
                crops.append({"box": box, "conf": conf, "cls": cls, "label": f"{self.names[int(cls)]} {conf:.2f}",
                              "im": crop})
                if folder is not None:
                    path = free_path(folder / "crops" / class_folders[int(cls)] / name)
                    if not write_image(path, crop):
                        raise UserError(f"{path}: cannot write the crop")
        if folder is not None:
            LOGGER.info("Saved %d crop%s to %s", len(crops), "s" * (len(crops) != 1), folder / "crops")
        return crops

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

    def tolist(self) -> list[HubResults]:
        """One HubResults per image (yolov5's `for result in results.tolist()`)."""
        return [HubResults([image], [detections], [name], self.names, self.milliseconds)
                for image, detections, name in zip(self._images, self._found, self.files)]


def free_path(path: Path) -> Path:
    """path, or <stem>2, <stem>3 ... when it exists (yolov5's numbering)."""
    number, candidate = 1, path
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.stem}{number}{path.suffix}")
    return candidate
