"""Exported models behind the inference contract, one module per runtime: onnxruntime (onnx_model.py), ais_bench for
Ascend .om (om_model.py), OpenVINO; what they share is inference/exported.py."""
