"""What `python -m detect.predict` writes to its run folder: annotated images and videos, YOLO txt labels, a json."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import cv2
import torch

from detect.data.categories import yolo_category_ids
from detect.errors import UserError
from detect.inference.annotate import annotate
from detect.inference.detector import Detections
from detect.inference.media import Frame
from detect.ops.boxes import xyxy_to_ltwh, xyxy_to_xywhn


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


class PredictOutputs:
    """Consumes each frame's detections and writes what the settings ask for into save_dir."""

    def __init__(self, save_dir: Path, names: tuple[str, ...], settings: OutputSettings) -> None:
        self.save_dir, self.settings = save_dir, settings
        self.labels_dir = save_dir / "labels"
        if settings.save_txt:
            self.labels_dir.mkdir(parents=True, exist_ok=True)
        self.category_ids = yolo_category_ids(names)  # COCO's ids for COCO's names, else k + 1 (data/categories.py)
        self.json_rows: list[dict] = []
        self.saved: list[Path] = []  # annotated images and videos, in order
        self._video: tuple[Path, cv2.VideoWriter] | None = None  # (source video, writer of its annotated copy)

    def add(self, frame: Frame, detections: Detections) -> None:
        """Write (or queue) everything for one image or video frame."""
        stem = frame.path.stem + (f"_{frame.index}" if frame.video else "")
        if self.settings.save_images:
            settings = self.settings
            annotated = annotate(frame.image, detections, settings.line_thickness, settings.hide_labels,
                                 settings.hide_conf)
            if frame.video:
                self._video_writer(frame).write(annotated)
            else:
                path = self.save_dir / frame.path.name
                if not cv2.imwrite(str(path), annotated):
                    raise UserError(f"{path}: cannot write the annotated image")
                self.saved.append(path)
        if self.settings.save_txt:
            text = yolo_txt(detections.rows, *frame.image.shape[:2], self.settings.save_conf)
            (self.labels_dir / f"{stem}.txt").write_text(text)
        if self.settings.save_json:
            self._add_json(frame, detections)

    def _add_json(self, frame: Frame, detections: Detections) -> None:
        image_id = int(frame.path.stem) if frame.path.stem.isnumeric() else frame.path.stem
        for box, score, cls in zip(xyxy_to_ltwh(detections.rows[:, :4]).tolist(), detections.scores.tolist(),
                                   detections.classes.tolist()):
            row = {"image_id": image_id, "file": str(frame.path), "category_id": self.category_ids[cls],
                   "bbox": [round(value, 3) for value in box], "score": round(score, 5)}
            self.json_rows.append({**row, "frame": frame.index} if frame.video else row)

    def _video_writer(self, frame: Frame) -> cv2.VideoWriter:
        """The open writer for this frame's video; a new video closes the previous one."""
        if self._video is not None and self._video[0] == frame.path:
            return self._video[1]
        self.close_video()
        path = self.save_dir / f"{frame.path.stem}.mp4"
        height, width = frame.image.shape[:2]
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), frame.fps or 30.0, (width, height))
        if not writer.isOpened():
            raise UserError(f"{path}: OpenCV cannot write an mp4v video here")
        self._video = (frame.path, writer)
        self.saved.append(path)
        return writer

    def close_video(self) -> None:
        if self._video is not None:
            self._video[1].release()
            self._video = None

    def finish(self) -> Path | None:
        """Close the last video; write predictions.json when asked (returns its path)."""
        self.close_video()
        if not self.settings.save_json:
            return None
        path = self.save_dir / "predictions.json"
        path.write_text(json.dumps(self.json_rows))
        return path
