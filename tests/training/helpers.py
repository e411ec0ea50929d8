"""A tiny dataset and the flags that make `python -m detect.train` finish in seconds on the CPU."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.data.helpers import write_sample, write_yaml


def tiny_dataset(root: Path, count: int = 8) -> Path:
    """`count` 96x128 images with two or three boxes of three classes; train and val are the same images."""
    for index in range(count):
        boxes = [(8 + index, 10, 50 + index, 60), (66, 22 + index, 120, 88)]
        if index % 2:
            boxes.append((30, 64, 60, 94))
        write_sample(root, "train", f"{index:03d}", 96, 128, boxes)
    return write_yaml(root)


def train_args(data: Path, project: Path, *extra: str, epochs: int = 2) -> list[str]:
    """detect.train flags for a yolov5n run at 64 px, batch 4, no workers, no progress bars."""
    return ["--cfg", "yolov5n.yaml", "--data", str(data), "--imgsz", "64", "--batch-size", "4",
            "--epochs", str(epochs), "--workers", "0", "--device", "cpu", "--project", str(project),
            "--no-progress", *extra]


def worker_pid(launcher: subprocess.Popen, setting: str) -> int:
    """The pid of the worker process that torchrun `launcher` started with `setting` in its environment
    ("RANK=1", "LOCAL_RANK=0")."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == launcher.pid and setting.encode() in environ:
            return int(entry.name)
    raise AssertionError(f"no worker with {setting} under torchrun pid {launcher.pid}")


def tagged_processes(tag: str) -> list[int]:
    """The live (not zombie) processes started with DETECT_TEST_JOB=tag in their environment: a job's torchrun, its
    ranks and their workers."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            tagged = entry.name.isdigit() and f"DETECT_TEST_JOB={tag}".encode() in (entry / "environ").read_bytes()
            if tagged and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
        except OSError:
            continue
    return found
