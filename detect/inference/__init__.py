"""Inference: a checkpoint or an exported ONNX as one predict callable (model.py, onnx_model.py), the Detector API,
what --source names (media.py), drawing detections and predict's outputs. May import floors 1-3."""
