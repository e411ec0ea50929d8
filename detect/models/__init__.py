"""YOLOv5 models: layers, the Detect head, the yaml builder, summaries, safe checkpoint files (safe_io.py) and
weights loading, ours and ultralytics/yolov5's (weights.py, yolov5_pickle.py)."""

from detect.models.spec import ModelSpec, load_model_spec, parse_model_spec
from detect.models.summary import ModelSummary, summarize
from detect.models.yolo import DetectionModel, PredictModule, build_model

__all__ = ["DetectionModel", "ModelSpec", "ModelSummary", "PredictModule", "build_model", "load_model_spec",
           "parse_model_spec", "summarize"]
