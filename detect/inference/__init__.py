"""Inference: a checkpoint or an exported model as one predict callable (model.py; exports in runtimes/), the Detector API,
what --source names (media.py), drawing detections and predict's outputs. May import floors 1-3."""
