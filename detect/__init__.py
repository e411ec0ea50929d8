"""detect: a YOLOv5 trainer that runs the same code on Ascend NPUs, NVIDIA GPUs and CPUs."""

import os
import sys

__version__ = "0.1.0"

# `python -m detect.<command>` turns torch's device-backend autoload off before anything imports torch: with torch_npu
# installed and CANN broken or not sourced, its autoload entry point makes `import torch` itself fail, --device cpu
# included (docs/torch-npu.md, "Autoload"); with autoload off, only the NPU backend loads torch_npu, and a failure there
# is one clear line. The rule (docs/architecture.md, "No work at import") still holds for library use: sys.argv[0] is
# "-m" only while `python -m` locates its module (Python docs, option -m), so this writes only when a detect module is
# the program. It must be here: `python -m detect.models` imports detect/models/__init__.py (and torch) before
# __main__.py runs. New CLIs need no line of their own. setdefault keeps a value the user exported
# (tests/test_entry.py).
# OMP_WAIT_POLICY=PASSIVE, read when torch loads OpenMP: torch's CPU threads sleep instead of spinning while they
# wait for each other, so they leave the cores to the DataLoader workers and other jobs (on the 2-core CPU: training
# end to end 0.84 of the model-only rate instead of 0.76, val on a busy machine 3x faster: docs/benchmarks.md).
if getattr(sys, "argv", [])[:1] == ["-m"]:
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
