"""`python -m detect.predict`: detections on images, folders, globs, lists and videos, drawn into runs/predict/<name>."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from detect import backend as backends
from detect import cli
from detect.config import NON_NEGATIVE, POSITIVE, UNIT, check_options, option, options_from_dict
from detect.errors import UserError
from detect.inference.detector import Detections, Detector, PredictSettings
from detect.inference.media import Frame, frames, list_sources
from detect.inference.outputs import OutputSettings, PredictOutputs
from detect.run_dir import make_run_dir

LOGGER = logging.getLogger("detect.predict")


@dataclasses.dataclass(frozen=True)
class PredictRunSettings:
    """The options of `python -m detect.predict` and `detect.predict.run`, with yolov5's detect.py names and defaults
    (the NMS defaults are the Detector's, PredictSettings)."""

    weights: str = option(description="ours (.pt), an ultralytics/yolov5 .pt, or an exported .onnx (onnxruntime)")
    source: str = option(description="an image, a video, a folder, a glob ('data/*.jpg') or a .txt list of paths")
    imgsz: tuple[int, ...] = option(PredictSettings.imgsz[:1], "inference size: one side, or height width",
                                    bound=POSITIVE)
    conf_thres: float = option(PredictSettings.conf_threshold, "confidence threshold", bound=UNIT)
    iou_thres: float = option(PredictSettings.iou_threshold, "NMS IoU threshold", bound=UNIT)
    max_det: int = option(PredictSettings.max_det, "maximum detections per image", bound=POSITIVE)
    classes: tuple[int, ...] | None = option(None, "keep only these class indices", bound=NON_NEGATIVE)
    agnostic_nms: bool = option(False, "NMS across classes")
    device: str = option("auto", backends.SPEC_HELP)
    half: bool = option(False, "fp16 inference (accelerators only)")
    augment: bool = option(False, "test-time augmentation: 3 scales, one flipped, merged before NMS (.pt only)")
    save_txt: bool = option(False, "write labels/<name>.txt (class cx cy w h, normalised)")
    save_conf: bool = option(False, "with --save-txt: append the score")
    save_json: bool = option(False, "write predictions.json (COCO-style rows with file names)")
    nosave: bool = option(False, "do not write annotated images and videos")
    line_thickness: int = option(3, "box line width in pixels", bound=POSITIVE)
    hide_labels: bool = option(False, "draw boxes without class names")
    hide_conf: bool = option(False, "draw class names without scores")
    project: str = option("runs/predict", "runs go to project/name")
    name: str = option("exp")
    exist_ok: bool = option(False, "reuse project/name instead of a new one")

    def __post_init__(self) -> None:
        check_options(self)
        if len(self.imgsz) > 2:
            raise UserError(f"--imgsz {' '.join(map(str, self.imgsz))}: one side or height width")

    def detector_settings(self) -> PredictSettings:
        """What the Detector needs of these options."""
        return PredictSettings(imgsz=(self.imgsz[0], self.imgsz[-1]), conf_threshold=self.conf_thres,
                               iou_threshold=self.iou_thres, max_det=self.max_det, classes=self.classes,
                               agnostic=self.agnostic_nms)


def parse_args(argv: list[str] | None) -> PredictRunSettings:
    parser = cli.settings_parser(PredictRunSettings, "python -m detect.predict", __doc__)
    return cli.settings_from_args(PredictRunSettings, parser.parse_args(argv))


def describe(frame: Frame, position: int, total: int, found: Detections, milliseconds: float) -> str:
    """yolov5's line: 'image 1/3 path: 480x640 2 persons, 1 bus, 35.2ms' (frames: 'video 1/1 (frame 3/30) path')."""
    where = f"video {position}/{total} (frame {frame.index + 1}/{frame.count})" if frame.video else \
        f"image {position}/{total}"
    counts = ", ".join(f"{count} {name}{'s' if count > 1 else ''}" for name, count in found.counts().items())
    height, width = found.input_size
    return f"{where} {frame.path}: {height}x{width} {counts or '(no detections)'}, {milliseconds:.1f}ms"


def run(**options: Any) -> Path:
    """Predict from Python with the CLI's flags as keyword arguments; returns the run folder."""
    return predict(options_from_dict(PredictRunSettings, options, "detect.predict.run"))


def predict(settings: PredictRunSettings) -> Path:
    """Predict on every frame of --source; returns the run folder. The CLI's body."""
    detector = Detector(settings.weights, settings.device, settings.detector_settings(), settings.half,
                        settings.augment)
    files = list_sources(settings.source)
    save_dir = make_run_dir(settings.project, settings.name, settings.exist_ok)
    outputs = PredictOutputs(save_dir, detector.names, OutputSettings(
        save_images=not settings.nosave, save_txt=settings.save_txt, save_conf=settings.save_conf, save_json=settings.save_json,
        line_thickness=settings.line_thickness, hide_labels=settings.hide_labels, hide_conf=settings.hide_conf))
    problems, times = [], []
    for position, path in enumerate(files, 1):
        for frame in frames(path):
            if frame.image is None:
                LOGGER.warning("%d/%d skipped: %s", position, len(files), frame.problem)
                problems.append(frame.problem)
                continue
            start = time.perf_counter()
            found = detector(frame.image)[0]
            times.append(1000 * (time.perf_counter() - start))
            LOGGER.info("%s", describe(frame, position, len(files), found, times[-1]))
            outputs.add(frame, found)
    json_path = outputs.finish()
    if times:
        LOGGER.info("Speed: %.1f ms per image (pre-process, inference and NMS) over %d images", sum(times) / len(times),
                    len(times))
    if problems:
        LOGGER.warning("%d unreadable file(s) skipped:\n  %s", len(problems), "\n  ".join(problems))
    if settings.save_txt:
        LOGGER.info("labels saved to %s", outputs.labels_dir)
    if json_path is not None:
        LOGGER.info("detections saved to %s", json_path)
    LOGGER.info("results saved to %s", save_dir)
    return save_dir


main = cli.main_for(parse_args, predict)


if __name__ == "__main__":
    cli.exit_process(main())
