"""`python -m detect.track`: each object followed across the frames of videos, folders of frames and live streams
(ByteTrack, OC-SORT or BoT-SORT from the trackers library on the detector's boxes, sliced ones too), written into
runs/track/<name> as a MOTChallenge file and a video with ids and trails per sequence."""

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
from detect.errors import UserError
from detect.inference.detector import Detector, PredictSettings
from detect.inference.model import IMGSZ_DEFAULT_HELP, check_imgsz_flag
from detect.inference.slicing import SliceSettings, SlicingFlags
from detect.inference.sources import open_source
from detect.inference.tracks.loop import track_frames
from detect.inference.tracks.outputs import TrackOutputs
from detect.inference.tracks.settings import TRACKER_HELP, load_tracker_settings
from detect.models.weights import YOLOV5_DEFAULT_WEIGHTS
from detect.run_dir import check_run_folder, make_run_dir

LOGGER = logging.getLogger("detect.track")
# ByteTrack's second stage matches the detections under its high threshold (0.25) to the tracks left over, so the
# detector must pass them on: ultralytics' track mode lowers its conf to 0.1 for the same reason.
TRACK_CONF = 0.1


@dataclasses.dataclass(frozen=True)
class TrackRunSettings(SlicingFlags):
    """The options of `python -m detect.track` and `detect.track.run` (predict's, where they apply)."""

    source: str = option(flags=("--source",), description="a video, folder of frames, glob, .txt list, .streams "
                         "list, URL, rtsp/rtmp/http stream or webcam index (0)")
    weights: tuple[str, ...] = option((YOLOV5_DEFAULT_WEIGHTS,), "ours (.pt), an ultralytics/yolov5 .pt, or an export "
                                      "(as predict takes them)")
    tracker: str = option("bytetrack", TRACKER_HELP)
    imgsz: tuple[int, ...] | None = option(None, "inference size: one side, or height width; " + IMGSZ_DEFAULT_HELP,
                                           bound=IMAGE_SIZE)
    conf_thres: float = option(TRACK_CONF, "confidence threshold (low: ByteTrack's second stage uses the weak boxes)",
                               bound=UNIT)
    iou_thres: float = option(PredictSettings.iou_threshold, "NMS IoU threshold", bound=UNIT)
    max_det: int = option(PredictSettings.max_det, "maximum detections per frame", bound=POSITIVE)
    classes: tuple[int, ...] | None = option(None, "track only these class indices", bound=NON_NEGATIVE)
    agnostic_nms: bool = option(False, "NMS across classes")
    device: str = option("auto", backends.SPEC_HELP)
    half: bool = option(False, "fp16 inference (on the CPU: fp32, with a warning)")
    vid_stride: int = option(1, "track every Nth frame of videos and streams", bound=POSITIVE)
    max_pixels: int = option(DEFAULT_MAX_PIXELS, MAX_PIXELS_HELP, bound=MAX_PIXELS)
    nosave: bool = option(False, "write only the MOT files, not the videos")
    line_thickness: int = option(2, "box and trail width in pixels", bound=POSITIVE)
    progress: bool = option(True, "progress bar (--no-progress: none)", flags=("--no-progress",))
    project: str = option("runs/track", "runs go to project/name")
    name: str = option("exp")
    exist_ok: bool = option(False, "reuse project/name instead of a new one")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_run_folder(self.project, self.name)
        check_imgsz_flag(self.imgsz)

    def detector_settings(self) -> PredictSettings:
        return PredictSettings(imgsz=self.imgsz and (self.imgsz[0], self.imgsz[-1]), conf_threshold=self.conf_thres,
                               iou_threshold=self.iou_thres, max_det=self.max_det, classes=self.classes,
                               agnostic=self.agnostic_nms, slicing=SliceSettings.asked(self))


parse_args = cli.settings_reader(TrackRunSettings, "python -m detect.track", __doc__)


def run(**options: Any) -> Path:
    """Track from Python with the CLI's flags as keyword arguments; returns the run folder."""
    return track(options_from_dict(TrackRunSettings, options, "detect.track.run"))


@atomic_file.command()  # what it reads is its sources until it ends
def track(settings: TrackRunSettings) -> Path:
    """Track every sequence of --source; returns the run folder. The CLI's body."""
    tracker = load_tracker_settings(settings.tracker)
    detector = Detector(settings.weights, settings.device, settings.detector_settings(), settings.half)
    with closing(open_source(settings.source, settings.vid_stride, settings.max_pixels)) as source:
        save_dir = make_run_dir(settings.project, settings.name, settings.exist_ok)
        outputs = TrackOutputs(save_dir, not settings.nosave, settings.vid_stride, settings.line_thickness)
        try:
            tracked = track_frames(source, detector, tracker, outputs, progress=settings.progress)
        finally:
            outputs.finish()
    if tracked.problems:
        LOGGER.warning("%d frame(s) skipped:\n  %s", len(tracked.problems), "\n  ".join(tracked.problems[:10]))
    if not tracked.frames:
        raise UserError(f"--source {settings.source}: no frame could be tracked"
                        + (f" ({tracked.problems[0]})" if tracked.problems else ""))
    resized = sum(stream.resized for stream in detector.tracking.streams.values())
    if resized:
        LOGGER.warning("%d frame(s) of another size than their sequence's first: tracked at its size", resized)
    LOGGER.info("%s; %.1f frames/s with %s%s", outputs.summary(detector.names), tracked.fps, tracker.tracker,
                f" on windows of {detector.sliced.settings.size} px" if detector.sliced else "")
    LOGGER.info("results saved to %s", save_dir)
    return save_dir


main = cli.main_for(parse_args, track)


if __name__ == "__main__":
    cli.exit_process(main())
