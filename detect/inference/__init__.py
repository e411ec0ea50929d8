"""Inference: a checkpoint or an exported model as one model (model.py; PyTorch and the exports' runtimes in
runtimes/) and its predict callable (predictor.py), the Detector API, what --source names (media.py), drawing
detections and predict's outputs (predict_outputs.py). May import floors 1-3."""
