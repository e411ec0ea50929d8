"""Run by tests/training/test_distributed.py under torchrun: `python tests/training/train_twice.py OUT DATA PROJECT`
trains twice in one job, as a script or --evolve's trials do, and writes into OUT/rank<R>.txt, after each run, the
names of this process's threads."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from detect import train


def main(out: str, data: str, project: str) -> None:
    report = Path(out) / f"rank{os.environ['RANK']}.txt"
    for _ in range(2):
        train.run(cfg="yolov5n.yaml", data=data, imgsz=64, batch_size=4, epochs=1, workers=0, device="cpu",
                  project=project, progress=False, noval=True, noplots=True)
        with report.open("a") as handle:
            handle.write(" ".join(sorted(thread.name for thread in threading.enumerate())) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
