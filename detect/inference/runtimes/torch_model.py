"""Our checkpoint or a yolov5 .pt run by PyTorch on the backend: the model fused and made ready to infer."""

from __future__ import annotations

import torch
from torch import nn

from detect.backend import Backend
from detect.models import DetectionModel


class TorchInference:
    """A DetectionModel made ready to infer on a backend: BatchNorm fused, SiLU in place, eval mode, fp16 when asked,
    channels_last where the backend is faster with it, and the backend's process-wide inference settings applied."""

    format = "pytorch"  # its name in inference/model.py's FORMATS
    fixed_shape = None
    batch = None
    nms = None

    def __init__(self, model: DetectionModel, backend: Backend, half: bool = False, fuse: bool = True) -> None:
        backend.prepare_steps()
        self.dtype = torch.float16 if half else torch.float32
        self.memory_format = torch.channels_last if backend.channels_last else torch.contiguous_format
        model = (model.fuse() if fuse else model).eval()
        # Each SiLU takes a conv's (or BatchNorm's) fresh output that nothing else reads, so at inference it may
        # overwrite it: one activation-sized tensor less per layer, 2-4% of yolov5n's CPU time at batch 16 and 640x480
        # (process time, best of 4), outputs bit-identical.
        for module in model.modules():
            if isinstance(module, nn.SiLU):
                module.inplace = True
        self.model = model.to(backend.device, self.dtype).to(memory_format=self.memory_format)
        self.names = tuple(model.names)
        self.stride = model.max_stride
        trained = model.trained.imgsz
        self.imgsz = None if trained is None else (trained, trained)  # the size it was trained at, if recorded

    @torch.no_grad()
    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) float in [0, 1] on the device -> (B, N, 5+nc) float32 decoded predictions."""
        images = images.to(self.dtype).contiguous(memory_format=self.memory_format)
        return self.model.predict(images).float()
