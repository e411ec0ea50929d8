"""How the epoch loop and the trainer's hooks talk: the hooks ask in `Control` (stop, save, end the run), the loop
answers in the events it sends (`StepEnd`); `StepHooks` is the loop's side of the hook list."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from detect.data import Batch


@dataclasses.dataclass
class Control:
    """What the hooks ask of the loop and the trainer; only the hooks' side writes it (a hook asks, the hook list
    withdraws a save once answered), the loop and the trainer read it. Any rank's ask holds for the job: the ranks
    agree at the next step boundary (the loop answers in StepEnd) or validation batch."""

    stop_signal: int | None = None  # stop at the next step boundary, last.pt written; exit 128 + this signal
    save_asked: bool = False  # write last.pt at the next step boundary (a mid-epoch save)
    end_training: bool = False  # end the run after this epoch (early stopping)

    def stop_asked(self) -> bool:
        """Whether a stop was asked on this rank (what a validation pass checks after each batch)."""
        return self.stop_signal is not None


@dataclasses.dataclass(frozen=True)
class StepEnd:
    """The loop's answer at the end of a step, sent with after_step: `save_now` when the ranks stopped at a step
    boundary that a save or a stop asked for (the counters then say where the epoch stands, for last.pt), `stopped`
    when a stop ends the epoch there."""

    save_now: bool = False
    stopped: bool = False


class StepHooks(Protocol):
    """The epoch loop's side of the hooks (the trainer's hook list, training/hooks.py): the requests it reads, the
    events it sends around each step."""

    @property
    def control(self) -> Control: ...

    def before_step(self, index: int, batch: Batch) -> None: ...

    def after_step(self, index: int, step: StepEnd) -> None: ...


class NoHooks:
    """No hook points, nothing asked (the loop alone, as benchmarks and tests run it)."""

    def __init__(self) -> None:
        self.control = Control()

    def before_step(self, index: int, batch: Batch) -> None:
        pass

    def after_step(self, index: int, step: StepEnd) -> None:
        pass


NO_HOOKS = NoHooks()
