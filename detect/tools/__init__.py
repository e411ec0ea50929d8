"""Migration aids, each a CLI: python -m detect.tools.profile, .compare and .benchmark (README, "Moving a CUDA
yolov5 workflow to Ascend")."""
