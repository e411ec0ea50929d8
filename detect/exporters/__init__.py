"""Exports of a trained model: the traced module and TorchScript (torchscript.py), ONNX (onnx_export.py) and the
Ascend .om through CANN's atc (om.py). May import floors 1-3."""
