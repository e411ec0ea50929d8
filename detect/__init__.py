"""detect: a YOLOv5 trainer that runs the same code on Ascend NPUs, NVIDIA GPUs and CPUs."""

__version__ = "0.1.0"
