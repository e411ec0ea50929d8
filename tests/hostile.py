"""What the hostile-input tests share besides tests/user_run.py's CLI run: the files of a folder tree, a refusal's one
line, and tiny checkpoints whose every class is detected."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import torch

from detect.models import DetectionModel, build_model
from detect.models.safe_io import save_checkpoint
from detect.models.weights import weights_payload


def tree(root: Path) -> set[Path]:
    """Every file and folder under root (links not followed)."""
    return {Path(folder) / name for folder, folders, files in os.walk(root) for name in folders + files}


def fingerprints(root: Path) -> dict[str, str]:
    """Every file, link and folder under `root` by relative path (links not followed): a file's sha256, a link's
    target, 'folder'. Two equal fingerprints: not a byte, link or folder of the tree changed."""
    found = {}
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(folder) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = f"link to {os.readlink(path)}"
            elif path.is_dir():
                found[key] = "folder"
            else:
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def assert_refused(done: subprocess.CompletedProcess, *pieces: str) -> str:
    """A run that stopped in a line or so (exit 2, no traceback; argparse prints its usage line first) whose last line
    is the error and holds each piece; returns that line."""
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) <= 2 and lines[-1].startswith("error: "), done.stderr
    for piece in pieces:
        assert piece in lines[-1], lines[-1]
    return lines[-1]


def every_class_model(names: list[str]) -> DetectionModel:
    """An untrained yolov5n whose Detect head ignores the image: anchor a of level l predicts class (3l + a) % nc
    with high confidence at every cell, so each of up to 9 classes is detected on any image."""
    torch.manual_seed(0)
    model = build_model("yolov5n.yaml", num_classes=len(names), names=list(names))
    detect = model.detect
    with torch.no_grad():
        for level, conv in enumerate(detect.m):
            conv.weight.zero_()
            bias = conv.bias.view(detect.na, detect.no)
            bias.zero_()
            bias[:, 4] = 5.0  # objectness
            bias[:, 5:] = -5.0
            for anchor in range(detect.na):
                bias[anchor, 5 + (3 * level + anchor) % len(names)] = 5.0
    return model.eval()


def save_model(model: DetectionModel, path: Path) -> Path:
    return save_checkpoint(path, weights_payload(model))
