"""Migration aids, each a CLI: python -m detect.tools.profile, .compare and .benchmark (docs/ascend.md, "Moving a CUDA
yolov5 workflow to Ascend")."""
