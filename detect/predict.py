"""`python -m detect.predict`: detections on images, videos, folders, globs, lists, URLs, live streams and webcams,
drawn into runs/predict/<name>."""

from __future__ import annotations

import dataclasses
import logging
from contextlib import closing
from pathlib import Path
from typing import Any

from detect import atomic_file, cli
from detect import backend as backends
from detect.config import IMAGE_SIZE, NON_NEGATIVE, POSITIVE, UNIT, option, options_from_dict
from detect.data.images.pixels import DEFAULT_MAX_PIXELS, MAX_PIXELS, MAX_PIXELS_HELP
from detect.inference.detector import Detector, PredictSettings
from detect.inference.model import IMGSZ_DEFAULT_HELP, check_imgsz_flag
from detect.inference.predict_outputs import OutputSettings, PredictOutputs, predict_frames
from detect.inference.sample_images import SAMPLES_DIR
from detect.inference.slicing import SliceSettings, SlicingFlags
from detect.inference.sources import open_source
from detect.models.weights import YOLOV5_DEFAULT_WEIGHTS
from detect.run_dir import check_run_folder, make_run_dir

LOGGER = logging.getLogger("detect.predict")


@dataclasses.dataclass(frozen=True)
class PredictRunSettings(SlicingFlags):
    """The options of `python -m detect.predict` and `detect.predict.run`, with yolov5's detect.py names and defaults
    (the NMS defaults are the Detector's, PredictSettings)."""

    weights: tuple[str, ...] = option((YOLOV5_DEFAULT_WEIGHTS,), "ours (.pt), an ultralytics/yolov5 .pt, or an export "
                                      "(.onnx, -int8.onnx, .torchscript, .om, an OpenVINO .xml or its folder); several "
                                      ".pt: one ensemble, their predictions joined before NMS (yolov5's); a bare "
                                      "name: the working folder, then ./weights/ (never downloaded)")
    source: str = option("", "an image, video, folder, glob ('data/*.jpg'), .txt list, .streams list, URL, "
                             "rtsp/rtmp/http stream or webcam index (0); default: the package's sample images")
    imgsz: tuple[int, ...] | None = option(None, "inference size: one side, or height width; " + IMGSZ_DEFAULT_HELP,
                                           bound=IMAGE_SIZE)
    conf_thres: float = option(PredictSettings.conf_threshold, "confidence threshold", bound=UNIT)
    iou_thres: float = option(PredictSettings.iou_threshold, "NMS IoU threshold", bound=UNIT)
    max_det: int = option(PredictSettings.max_det, "maximum detections per image (--slice: per window)",
                          bound=POSITIVE)
    classes: tuple[int, ...] | None = option(None, "keep only these class indices", bound=NON_NEGATIVE)
    agnostic_nms: bool = option(False, "NMS across classes")
    device: str = option("auto", backends.SPEC_HELP)
    nms_device: str = option("device", backends.NMS_DEVICE_HELP, choices=backends.NMS_DEVICES)
    half: bool = option(False, "fp16 inference (on the CPU: fp32, with a warning)")
    augment: bool = option(False, "test-time augmentation: 3 scales, one flipped, merged before NMS (.pt only)")
    save_txt: bool = option(False, "write labels/<name>.txt (class cx cy w h, normalised)")
    save_conf: bool = option(False, "with --save-txt: append the score")
    save_json: bool = option(False, "write predictions.json (COCO-style rows with file names)")
    save_crop: bool = option(False, "write each detection's crop to crops/<class name>/<image name>.jpg")
    view_img: bool = option(False, "show the frames with their boxes in a window (where a display can be used)")
    vid_stride: int = option(1, "predict on every Nth frame of videos and streams", bound=POSITIVE)
    max_pixels: int = option(DEFAULT_MAX_PIXELS, MAX_PIXELS_HELP, bound=MAX_PIXELS)
    nosave: bool = option(False, "do not write annotated images and videos")
    line_thickness: int = option(3, "box line width in pixels", bound=POSITIVE)
    hide_labels: bool = option(False, "draw boxes without class names")
    hide_conf: bool = option(False, "draw class names without scores")
    project: str = option("runs/predict", "runs go to project/name")
    name: str = option("exp")
    exist_ok: bool = option(False, "reuse project/name instead of a new one")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_run_folder(self.project, self.name)
        check_imgsz_flag(self.imgsz)

    def output_settings(self) -> OutputSettings:
        """What the run folder gets, and whether frames are shown."""
        return OutputSettings(save_images=not self.nosave, save_txt=self.save_txt, save_conf=self.save_conf,
                              save_json=self.save_json, line_thickness=self.line_thickness,
                              hide_labels=self.hide_labels, hide_conf=self.hide_conf, save_crop=self.save_crop,
                              view_img=self.view_img)

    def detector_settings(self) -> PredictSettings:
        """What the Detector needs of these options."""
        return PredictSettings(imgsz=self.imgsz and (self.imgsz[0], self.imgsz[-1]), conf_threshold=self.conf_thres,
                               iou_threshold=self.iou_thres, max_det=self.max_det, classes=self.classes,
                               agnostic=self.agnostic_nms, slicing=SliceSettings.asked(self),
                               nms_device=self.nms_device)


parse_args = cli.settings_reader(PredictRunSettings, "python -m detect.predict", __doc__,
                                 no_ops=("--dnn", "--update", "--data"))


def run(**options: Any) -> Path:
    """Predict from Python with the CLI's flags as keyword arguments; returns the run folder."""
    return predict(options_from_dict(PredictRunSettings, options, "detect.predict.run"))


@atomic_file.command()  # what it reads is its sources until it ends
def predict(settings: PredictRunSettings) -> Path:
    """Predict on every frame of --source; returns the run folder. The CLI's body."""
    detector = Detector(settings.weights, settings.device, settings.detector_settings(), settings.half,
                        settings.augment)
    if not settings.source:
        LOGGER.info("no --source: predicting on the sample images in %s", SAMPLES_DIR)
    with closing(open_source(settings.source or str(SAMPLES_DIR), settings.vid_stride, settings.max_pixels)) as source:
        save_dir = make_run_dir(settings.project, settings.name, settings.exist_ok)
        LOGGER.info("%s at %s", " + ".join(settings.weights), detector.input_size)
        outputs = PredictOutputs(save_dir, detector.names, settings.output_settings())
        times, problems = predict_frames(source, detector, outputs)
    if times:
        LOGGER.info("Speed: %.1f ms per image (pre-process, inference and NMS) over %d images", sum(times) / len(times),
                    len(times))
    if problems:
        LOGGER.warning("%d unreadable file(s) skipped:\n  %s", len(problems), "\n  ".join(problems))
    outputs.finish()
    return save_dir


main = cli.main_for(parse_args, predict)


if __name__ == "__main__":
    cli.exit_process(main())
