"""What the teacher costs a training step, timed once as a run with a teacher is set up: a copy of the student's
step (training/step.py's forward_loss, then the backward; no optimizer step) on a noise batch at the run's batch and
size, with the teacher's term and without it, alternating after a warm-up step of each. The run's own model, its
projectors, their BatchNorm statistics and the global RNG are left as they were."""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time

from detect.data.batch import noise_batch
from detect.data.device_batch import DeviceBatch, to_device_batch
from detect.training.distributed import DistContext
from detect.training.optim import unwrap_model
from detect.training.step import TrainingParts, forward_loss

ROUNDS = 3  # each one step with the teacher and one without, back to back (a load that comes and goes moves both)


@dataclasses.dataclass(frozen=True)
class TeacherCost:
    """A training step's seconds with the teacher and without, round by round, at one batch size."""

    with_teacher: tuple[float, ...]
    without: tuple[float, ...]
    batch_size: int

    @property
    def ratio(self) -> float:
        """The step's time with the teacher as a multiple of its time without: the median over the rounds."""
        return statistics.median(taught / alone for taught, alone in zip(self.with_teacher, self.without, strict=True))

    def __str__(self) -> str:
        taught, alone = statistics.median(self.with_teacher), statistics.median(self.without)
        return (f"{self.batch_size / taught:.1f} img/s with the teacher, {self.batch_size / alone:.1f} without: "
                f"{self.ratio:.2f}x the step's time (forward, loss and backward at batch {self.batch_size}, medians "
                f"of {len(self.without)} rounds)")


def _step_seconds(parts: TrainingParts, batch: DeviceBatch) -> float:
    started = time.perf_counter()
    loss, _ = forward_loss(parts, batch)
    loss.backward()
    parts.backend.synchronize()
    seconds = time.perf_counter() - started
    parts.train_model.zero_grad(set_to_none=True)
    if parts.distill is not None:
        parts.distill.projectors.zero_grad(set_to_none=True)
    return seconds


def time_teacher(parts: TrainingParts, batch_size: int, imgsz: int) -> TeacherCost:
    """The step of copies of `parts`' student and projectors (the teacher shared: it holds no state a step changes),
    timed with the teacher and without (TeacherCost). Every rank of a job times its own at once, so that the copies'
    SyncBatchNorm (--sync-bn) finds its peers."""
    student = copy.deepcopy(unwrap_model(parts.train_model)).train()
    distill = dataclasses.replace(parts.distill, projectors=copy.deepcopy(parts.distill.projectors),
                                  student_anchors=student.detect.anchors)
    taught = dataclasses.replace(parts, train_model=student, distill=distill, context=DistContext())
    alone = dataclasses.replace(taught, distill=None)
    batch = to_device_batch(noise_batch(batch_size, imgsz, student.nc, seed=0), parts.backend)
    for timed in (taught, alone):
        _step_seconds(timed, batch)
    rounds = [(_step_seconds(taught, batch), _step_seconds(alone, batch)) for _ in range(ROUNDS)]
    with_teacher, without = zip(*rounds, strict=True)
    return TeacherCost(with_teacher, without, batch_size)
