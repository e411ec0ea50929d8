"""What `python -m detect.predict` writes and shows: annotated images and videos, YOLO txt labels, a json, crops of
each detection, a window per source (--view-img), and its line per frame; predict_frames feeds them."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import torch

from detect.atomic_file import VideoFile, make_folder, write_image, write_text
from detect.data.categories import yolo_category_ids
from detect.errors import UserError
from detect.inference.annotate import annotate
from detect.inference.detector import Detections, Detector
from detect.inference.media import Frame
from detect.inference.slicing import TooManyWindows
from detect.inference.sources import Source
from detect.ops.boxes import xyxy_to_ltwh, xyxy_to_xywhn
from detect.run_dir import safe_names

LOGGER = logging.getLogger(__name__)
# yolov5's --save-crop (save_one_box): each side of the box times 1.02 plus 10 pixels, clipped to the image.
CROP_GAIN, CROP_PAD = 1.02, 10


def yolo_txt(detections: torch.Tensor, height: int, width: int, save_conf: bool) -> str:
    """(n, 6) [x1, y1, x2, y2, score, class] pixel detections as YOLO txt lines: class cx cy w h [score],
    normalised to a (height, width) image."""
    boxes = xyxy_to_xywhn(detections[:, :4].double(), width, height).tolist()
    rows = []
    for (cx, cy, w, h), (score, cls) in zip(boxes, detections[:, 4:].tolist()):
        row = f"{int(cls)} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}"
        rows.append(row + (f" {score:.5f}" if save_conf else ""))
    return "".join(row + "\n" for row in rows)


@dataclasses.dataclass(frozen=True)
class OutputSettings:
    """Which files to write and how boxes are drawn (yolov5's flags)."""

    save_images: bool = True  # annotated images and videos (--nosave turns them off)
    save_txt: bool = False
    save_conf: bool = False
    save_json: bool = False
    line_thickness: int = 3
    hide_labels: bool = False
    hide_conf: bool = False
    save_crop: bool = False  # crops/<class name, made safe>/<stem>.jpg, then <stem>2.jpg, ... (yolov5's layout)
    view_img: bool = False  # a window per source, where a display can be used


class PredictOutputs:
    """Consumes each frame's detections and writes what the settings ask for into save_dir."""

    def __init__(self, save_dir: Path, names: tuple[str, ...], settings: OutputSettings) -> None:
        self.save_dir, self.settings = save_dir, settings
        self.labels_dir = save_dir / "labels"
        if settings.save_txt:
            make_folder(self.labels_dir)
        self.category_ids = yolo_category_ids(names)  # COCO's ids for COCO's names, else k + 1 (data/categories.py)
        self.crop_folders = safe_names(names)  # a class name from a file is no path: '../x' is '.._x'
        self.json_rows: list[dict] = []
        self.saved: list[Path] = []  # annotated images and videos, in order
        self._videos: dict[Path, VideoFile] = {}  # source video or stream -> its annotated copy
        self._crop_numbers: dict[Path, int] = {}  # folder/stem -> the number its next crop takes
        self.viewer = Viewer() if settings.view_img else None

    def add(self, frame: Frame, detections: Detections) -> None:
        """Write (or queue) everything for one image or video frame."""
        stem = frame.path.stem + (f"_{frame.index}" if frame.video else "")
        settings = self.settings
        if settings.save_images or self.viewer is not None:
            annotated = annotate(frame.image, detections, settings.line_thickness, settings.hide_labels,
                                 settings.hide_conf)
            if self.viewer is not None:
                self.viewer.show(frame.name, annotated)
            if settings.save_images:
                self._save_annotated(frame, annotated)
        if settings.save_crop:
            self._save_crops(frame.image, detections, stem)
        if settings.save_txt:
            text = yolo_txt(detections.rows, *frame.image.shape[:2], settings.save_conf)
            write_text(self.labels_dir / f"{stem}.txt", text)
        if settings.save_json:
            self._add_json(frame, detections)

    def _save_annotated(self, frame: Frame, annotated: np.ndarray) -> None:
        if frame.video:
            self._video_writer(frame).write(annotated)
            return
        path = self.save_dir / frame.path.name
        if not write_image(path, annotated):
            raise UserError(f"{path}: cannot write the annotated image")
        self.saved.append(path)

    def _save_crops(self, image: np.ndarray, detections: Detections, stem: str) -> None:
        """Each detection's crop of the unannotated image under crops/<class name made safe>/."""
        for box, cls in zip(detections.boxes.tolist(), detections.classes.tolist()):
            left, top, right, bottom = crop_box(box, *image.shape[:2])
            if right <= left or bottom <= top:
                continue  # a box wholly outside the image
            folder = self.save_dir / "crops" / self.crop_folders[cls]
            write_image(self._crop_path(folder, stem), image[top:bottom, left:right])

    def _crop_path(self, folder: Path, stem: str) -> Path:
        """folder/<stem>.jpg, or <stem>2.jpg, <stem>3.jpg, ... when taken (yolov5's numbering; under --exist-ok, by
        an earlier run too)."""
        number = self._crop_numbers.get(folder / stem, 1)
        while (path := folder / f"{stem}{number if number > 1 else ''}.jpg").exists():
            number += 1
        self._crop_numbers[folder / stem] = number + 1
        return path

    def _add_json(self, frame: Frame, detections: Detections) -> None:
        image_id = int(frame.path.stem) if frame.path.stem.isnumeric() else frame.path.stem
        for box, score, cls in zip(xyxy_to_ltwh(detections.rows[:, :4]).tolist(), detections.scores.tolist(),
                                   detections.classes.tolist()):
            row = {"image_id": image_id, "file": frame.name, "category_id": self.category_ids[cls],
                   "bbox": [round(value, 3) for value in box], "score": round(score, 5)}
            self.json_rows.append({**row, "frame": frame.index} if frame.video else row)

    def _video_writer(self, frame: Frame) -> VideoFile:
        """The open video for this frame's video or stream; a new video file closes the previous one."""
        if frame.path in self._videos:
            return self._videos[frame.path]
        if not frame.stream:
            self.close_videos()
        path = self.save_dir / f"{frame.path.stem}.mp4"
        height, width = frame.image.shape[:2]
        self._videos[frame.path] = video = VideoFile(path, frame.fps or 30.0, (width, height))
        self.saved.append(path)
        return video

    def close_videos(self) -> None:
        for video in self._videos.values():
            video.close()
        self._videos.clear()

    def finish(self) -> None:
        """Close the videos, write predictions.json when asked, and say where everything went."""
        self.close_videos()
        if self.settings.save_json:
            json_path = write_text(self.save_dir / "predictions.json", json.dumps(self.json_rows))
            LOGGER.info("detections saved to %s", json_path)
        if self.settings.save_txt:
            LOGGER.info("labels saved to %s", self.labels_dir)
        if self.settings.save_crop:
            LOGGER.info("crops saved to %s", self.save_dir / "crops")
        LOGGER.info("results saved to %s", self.save_dir)


def crop_box(box: list[float], height: int, width: int) -> tuple[int, int, int, int]:
    """An [x1, y1, x2, y2] pixel box grown as yolov5's crops are (CROP_GAIN, CROP_PAD) and clipped to a (height,
    width) image, as whole pixels (left, top, right, bottom)."""
    x1, y1, x2, y2 = box
    half_w, half_h = ((x2 - x1) * CROP_GAIN + CROP_PAD) / 2, ((y2 - y1) * CROP_GAIN + CROP_PAD) / 2
    centre_x, centre_y = (x1 + x2) / 2, (y1 + y2) / 2
    return (int(min(max(centre_x - half_w, 0), width)), int(min(max(centre_y - half_h, 0), height)),
            int(min(max(centre_x + half_w, 0), width)), int(min(max(centre_y + half_h, 0), height)))


def display_problem() -> str | None:
    """Why cv2.imshow cannot show a window here, or None."""
    if re.search(r"^\s*GUI:\s*NONE\s*$", cv2.getBuildInformation(), re.MULTILINE):
        return "this OpenCV has no GUI (opencv-python-headless)"
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no display (DISPLAY is not set)"
    return None


class Viewer:
    """A window per source showing its annotated frames (yolov5's --view-img); where none can be shown, one line says
    so and the run goes on without."""

    def __init__(self) -> None:
        self.problem = display_problem()
        if self.problem:
            LOGGER.warning("--view-img: %s; frames are not shown", self.problem)

    def show(self, title: str, image: np.ndarray) -> None:
        if self.problem:
            return
        try:
            cv2.imshow(title, image)
            cv2.waitKey(1)  # lets the window draw
        except cv2.error as error:
            self.problem = str(error).strip().splitlines()[-1]
            LOGGER.warning("--view-img: cv2.imshow failed (%s); frames are not shown", self.problem)


def describe(frame: Frame, found: Detections, milliseconds: float) -> str:
    """yolov5's line: 'image 1/3 path: 480x640 2 persons, 1 bus, 35.2ms' (a video: 'video 1/1 (frame 3/30) path',
    a stream: 'stream 1/2 (frame 3) url'; sliced: '25 windows of 640x640' for the input)."""
    if frame.stream:
        where = f"stream {frame.position}/{frame.total} (frame {frame.index + 1})"
    elif frame.video:
        where = f"video {frame.position}/{frame.total} (frame {frame.index + 1}/{frame.count})"
    else:
        where = f"image {frame.position}/{frame.total}"
    counts = ", ".join(f"{count} {name}{'s' if count > 1 else ''}" for name, count in found.counts().items())
    height, width = found.input_size
    inputs = f"{height}x{width}" if found.windows == 1 else f"{found.windows} windows of {height}x{width}"
    return f"{where} {frame.name}: {inputs} {counts or '(no detections)'}, {milliseconds:.1f}ms"


def predict_frames(source: Source, detector: Detector, outputs: PredictOutputs) -> tuple[list[float], list[str]]:
    """Each frame's detections to the outputs; returns the ms per frame and the unreadable files. Ctrl-C ends a live
    source as its end would (its videos are then closed whole)."""
    times, problems = [], []
    try:
        for frame in source:
            if frame.image is None:
                LOGGER.warning("%d/%d skipped: %s", frame.position, frame.total, frame.problem)
                problems.append(frame.problem)
                continue
            start = time.perf_counter()
            try:
                found = detector(frame.image)[0]
            except TooManyWindows as error:  # --slice: this image alone is skipped, by name
                LOGGER.warning("%d/%d skipped: %s: %s", frame.position, frame.total, frame.name, error)
                problems.append(f"{frame.name}: {error}")
                continue
            times.append(1000 * (time.perf_counter() - start))
            LOGGER.info("%s", describe(frame, found, times[-1]))
            outputs.add(frame, found)
    except KeyboardInterrupt:
        if not source.live:
            raise
        LOGGER.info("stopped (Ctrl-C)")
    return times, problems
