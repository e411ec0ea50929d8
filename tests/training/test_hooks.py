"""The hook points are the public callback API: a user's hook sees every event in order and can stop the run."""

from __future__ import annotations

import signal

import pytest

from detect import train
from detect.errors import Interrupted
from detect.training.hooks import Hook
from tests.training.helpers import tiny_dataset

BATCHES = 2  # 8 images at batch 4


class Recorder(Hook):
    """Writes down every call it gets."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def before_train(self, run):
        self.events.append(("before_train", run.counters.epoch))

    def before_epoch(self, run, epoch):
        self.events.append(("before_epoch", epoch))

    def before_step(self, run, index, batch):
        self.events.append(("before_step", index, len(batch)))

    def after_step(self, run, index, step):
        self.events.append(("after_step", index))

    def after_epoch(self, run, epoch, row):
        self.events.append(("after_epoch", epoch, row["epoch"], "metrics/mAP_0.5" in row))

    def after_train(self, run, metrics):
        self.events.append(("after_train", metrics is not None and 0 <= metrics.map50_95 <= 1))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny"))


def _options(data, tmp_path):
    return {"cfg": "yolov5n.yaml", "data": str(data), "imgsz": 64, "batch_size": 4, "epochs": 2, "workers": 0,
            "device": "cpu", "project": str(tmp_path), "progress": False, "noplots": True}


def test_a_callback_sees_every_hook_point_in_order(data, tmp_path):
    recorder = Recorder()
    train.run(callbacks=[recorder], **_options(data, tmp_path))
    steps = [event for index in range(BATCHES) for event in (("before_step", index, 4), ("after_step", index))]
    epoch = [[("before_epoch", number), *steps, ("after_epoch", number, number, True)] for number in range(2)]
    assert recorder.events == [("before_train", 0), *epoch[0], *epoch[1], ("after_train", True)]


def test_a_callback_stops_the_run_at_a_step_boundary_with_last_pt(data, tmp_path):
    class StopAfterFirstStep(Recorder):
        def after_step(self, run, index, step):
            super().after_step(run, index, step)
            run.control.stop_signal = signal.SIGTERM

    hook = StopAfterFirstStep()
    with pytest.raises(Interrupted, match="stopped at epoch 1, batch 2/2; resume with"):
        train.run(callbacks=[hook], **_options(data, tmp_path))
    # Asked after step 0, the job stops at the next optimizer step's boundary (warmup steps every batch).
    assert hook.events[-2:] == [("after_step", 1), ("after_train", False)]
    assert (tmp_path / "exp" / "weights" / "last.pt").is_file()


def test_a_save_asked_once_is_answered_at_the_next_boundary_once(data, tmp_path):
    class SaveOnce(Hook):
        """Asks for one mid-epoch save before the run's first step; writes down the loop's answers."""

        def __init__(self) -> None:
            self.answers: list[tuple] = []

        def before_step(self, run, index, batch):
            if run.counters.iteration == 0:
                run.control.save_asked = True

        def after_step(self, run, index, step):
            self.answers.append((run.counters.epoch, index, step.save_now, step.stopped, run.control.save_asked))

    hook = SaveOnce()
    train.run(callbacks=[hook], **_options(data, tmp_path))
    # Warmup steps the optimizer every batch: the first step is a boundary; the ask is then withdrawn.
    assert hook.answers == [(0, 0, True, False, True), (0, 1, False, False, False), (1, 0, False, False, False),
                            (1, 1, False, False, False)]
