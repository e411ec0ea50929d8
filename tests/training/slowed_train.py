"""`python tests/training/slowed_train.py ARGS` (alone or under torchrun): `python -m detect.train ARGS` with one
stage slowed down so that a test can send a signal while the run is in it.

SLOWED names the stage: `validation` (each batch of a validation pass, from pass number SLOWED_PASS on, counting
from 1 per process), `check` (each image of the label check, in a process pool however small the split) or `save`
(each checkpoint written); SLOWED_SECONDS how long each call waits (default 0.5). The file MARKER is created each
time the slowed stage is entered; with HOLD set, the stage then waits until the file HOLD exists (a test holds the
run there until it is ready)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from detect import cli, train
from detect.data.labels import check, checked
from detect.evaluation import val_loop
from detect.models import safe_io
from detect.training import hooks
from detect.training.setup import build

MARKER = Path(os.environ.get("MARKER", "marker"))
SECONDS = float(os.environ.get("SLOWED_SECONDS", "0.5"))
HOLD = Path(os.environ["HOLD"]) if os.environ.get("HOLD") else None
check_image = check.check_image


def slowed(function):
    """`function`, which first creates MARKER and waits SECONDS."""

    def wrapper(*args, **kwargs):
        MARKER.touch()
        while HOLD is not None and not HOLD.exists():
            time.sleep(0.05)
        time.sleep(SECONDS)
        return function(*args, **kwargs)

    return wrapper


def slow_check_image(*args, **kwargs):
    """check.check_image, slowed: a module-level function, which the label check's process pool can pickle."""
    return slowed(check_image)(*args, **kwargs)


def slow_validation(first_pass: int) -> None:
    """Each batch of the validation passes from `first_pass` on slowed."""
    passes, predict_shard, detections = [0], val_loop.predict_shard, val_loop._detections
    slow = slowed(detections)

    def counted(*args, **kwargs):
        passes[0] += 1
        return predict_shard(*args, **kwargs)

    def batch(*args, **kwargs):
        return (slow if passes[0] >= first_pass else detections)(*args, **kwargs)

    val_loop.predict_shard, val_loop._detections = counted, batch


def main() -> int:
    stage = os.environ["SLOWED"]
    if stage == "validation":
        slow_validation(int(os.environ.get("SLOWED_PASS", "1")))
    elif stage == "check":
        checked.PROCESS_POOL_FROM = 1
        check.check_image = slow_check_image
    elif stage == "save":
        build.save_checkpoint = hooks.save_checkpoint = slowed(safe_io.save_checkpoint)
    else:
        raise SystemExit(f"SLOWED={stage}: validation, check or save")
    return train.main(sys.argv[1:])


if __name__ == "__main__":
    cli.exit_process(main())
