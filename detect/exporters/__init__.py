"""Exports of a trained model: the traced module and TorchScript (torchscript.py), ONNX (onnx_export.py), the
Ascend .om through CANN's atc (om.py), OpenVINO IR and a Triton model repository (triton.py). May import floors 1-3."""
