"""Models behind the inference contract, one module per runtime: PyTorch for checkpoints (torch_model.py), several of
them as one ensemble (ensemble_model.py); for exports onnxruntime (onnx_model.py), ais_bench for Ascend .om
(om_model.py), OpenVINO, TorchScript; what the exports share is inference/exported.py."""
