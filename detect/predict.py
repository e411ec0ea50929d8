"""`python -m detect.predict`: detections on images, folders, globs, lists and videos, drawn into runs/predict/<name>."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from detect import backend as backends
from detect import cli
from detect.inference.detector import Detections, Detector, PredictSettings
from detect.inference.media import Frame, frames, list_sources
from detect.inference.outputs import OutputSettings, PredictOutputs
from detect.run_dir import make_run_dir

LOGGER = logging.getLogger("detect.predict")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = cli.ArgumentParser(prog="python -m detect.predict", description=__doc__)
    add = parser.add_argument
    add("--weights", required=True, help="ours (.pt), an ultralytics/yolov5 .pt, or an exported .onnx (onnxruntime)")
    add("--source", required=True, help="an image, a video, a folder, a glob ('data/*.jpg') or a .txt list of paths")
    add("--imgsz", type=cli.positive_int, nargs="+", default=[640], help="inference size: one side, or height width")
    add("--conf-thres", type=cli.unit_float, default=0.25, help="confidence threshold")
    add("--iou-thres", type=cli.unit_float, default=0.45, help="NMS IoU threshold")
    add("--max-det", type=cli.positive_int, default=1000, help="maximum detections per image")
    add("--classes", type=cli.non_negative_int, nargs="+", default=None, help="keep only these class indices")
    add("--agnostic-nms", action="store_true", help="NMS across classes")
    add("--device", default="auto", help=backends.SPEC_HELP)
    add("--half", action="store_true", help="fp16 inference (accelerators only)")
    add("--save-txt", action="store_true", help="write labels/<name>.txt (class cx cy w h, normalised)")
    add("--save-conf", action="store_true", help="with --save-txt: append the score")
    add("--save-json", action="store_true", help="write predictions.json (COCO-style rows with file names)")
    add("--nosave", action="store_true", help="do not write annotated images and videos")
    add("--line-thickness", type=cli.positive_int, default=3, help="box line width in pixels")
    add("--hide-labels", action="store_true", help="draw boxes without class names")
    add("--hide-conf", action="store_true", help="draw class names without scores")
    add("--project", default="runs/predict", help="runs go to project/name")
    add("--name", default="exp")
    add("--exist-ok", action="store_true", help="reuse project/name instead of a new one")
    args = parser.parse_args(argv)
    if len(args.imgsz) > 2:
        parser.error(f"argument --imgsz: one side or height width, got {len(args.imgsz)} numbers")
    return args


def describe(frame: Frame, position: int, total: int, found: Detections, milliseconds: float) -> str:
    """yolov5's line: 'image 1/3 path: 480x640 2 persons, 1 bus, 35.2ms' (frames: 'video 1/1 (frame 3/30) path')."""
    where = f"video {position}/{total} (frame {frame.index + 1}/{frame.count})" if frame.video else \
        f"image {position}/{total}"
    counts = ", ".join(f"{count} {name}{'s' if count > 1 else ''}" for name, count in found.counts().items())
    height, width = found.input_size
    return f"{where} {frame.path}: {height}x{width} {counts or '(no detections)'}, {milliseconds:.1f}ms"


def run(args: argparse.Namespace) -> Path:
    """Predict on every frame of --source; returns the run folder."""
    settings = PredictSettings(imgsz=(args.imgsz[0], args.imgsz[-1]), conf_threshold=args.conf_thres,
                               iou_threshold=args.iou_thres, max_det=args.max_det,
                               classes=tuple(args.classes) if args.classes else None, agnostic=args.agnostic_nms)
    detector = Detector(args.weights, args.device, settings, args.half)
    files = list_sources(args.source)
    save_dir = make_run_dir(args.project, args.name, args.exist_ok)
    outputs = PredictOutputs(save_dir, detector.names, OutputSettings(
        save_images=not args.nosave, save_txt=args.save_txt, save_conf=args.save_conf, save_json=args.save_json,
        line_thickness=args.line_thickness, hide_labels=args.hide_labels, hide_conf=args.hide_conf))
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
    if args.save_txt:
        LOGGER.info("labels saved to %s", outputs.labels_dir)
    if json_path is not None:
        LOGGER.info("detections saved to %s", json_path)
    LOGGER.info("results saved to %s", save_dir)
    return save_dir


main = cli.main_for(parse_args, run)


if __name__ == "__main__":
    cli.exit_process(main())
