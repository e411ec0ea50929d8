"""Run by tests/training/test_two_ranks.py, once per rank under torchrun or once alone:
`python two_ranks_worker.py OPTIONS RECORDS [PATCH ...]` trains with `detect.train.run(**OPTIONS)` (a json file;
"profile": [WAIT, WARMUP, ACTIVE] for --profile), ends as the train CLI does (a UserError: one line, exit code 2) and
writes what this rank saw to RECORDS/rank<RANK>.json.

Every rank writes down its hook points (a hook appended after all of the rank's own), the anchors of its model and
loss, its AMP choice, whether the profiler was on at each step, the step boundaries it saved at, the files it wrote
(checkpoints and images), its calls of AutoAnchor, the AMP timing, the AMP check and labels.png, and what a user
callback was called with. PATCH is any of:
  npu                two NPU stand-ins (tests/npu_standin.py) placed on the CPU, joined by gloo
  npu:warn           the same, an op without an NPU kernel warned about, not refused (host code such as NMS on the
                     host runs on CPU tensors, which the stand-in cannot tell from its NPU ones)
  slow:NAME:S        on the main rank, build.NAME (autoanchor, amp_speed, check_amp or plot_label_stats) takes S
                     seconds longer
  amp-disagrees      the AMP check runs, and its verdict is then made a disagreement
  amp-speed:X        the AMP timing's steps take 1 s in fp32 and 1/X s in bf16 (X > 1.15: bf16 by default)
  save-due           --save-minutes' clock is always due (as tests/training/test_preemption.py forces it)
  no-better-fitness  the callback puts the best fitness out of reach from the start (best epoch: the first), so
                     --patience fires
  scaler-log         what torch_npu's GradScaler printed (the NPU backend's log at DEBUG) is written down, with each
                     epoch's numerics
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

import cv2
import torch
from matplotlib.figure import Figure

from detect import cli, train
from detect.backend.profiler import ProfileSchedule
from detect.training import hooks, trainer
from detect.training.hooks import Hook, HookList
from detect.training.resume import TrainingCheckpoint
from detect.training.setup import build

RANK = int(os.environ.get("RANK", "0"))
UNREACHABLE_FITNESS = 2.0  # fitness is a weighted mean of mAPs, at most 1
RECORD: dict = {"rank": RANK, "calls": [], "writes": [], "callbacks": [], "hooks": [], "profiled": [], "saves": [],
                "anchors": [], "scaler_log": [], "numerics": []}


def npu_standins_on_the_cpu(fallback: str = "raise") -> None:
    """detect sees two NPUs, whose backends put their tensors on the CPU and join the job through gloo."""
    from tests.npu_standin import enforce, make_torch_npu

    sys.modules["torch_npu"] = make_torch_npu(device_count=2)
    enforce(sys.modules["torch_npu"], fallback)  # every op of the rank checked as torch_npu would, for its life
    from detect.backend import npu

    original = npu.NpuBackend.__init__

    def on_cpu(self, index: int = 0, **options) -> None:
        original(self, index, device=torch.device("cpu"), **options)

    npu.NpuBackend.__init__ = on_cpu
    npu.NpuBackend.distributed_backend = "gloo"


def main_rank_work(delays: dict[str, float]) -> None:
    """AutoAnchor, the AMP timing, the AMP check and labels.png as build.py calls them: written down, and on the main
    rank (rank 0 of a new job) `delays[name]` seconds longer."""
    def slowed(function, seconds: float):
        def call(*args, **kwargs):
            RECORD["calls"].append(function.__name__)
            if RANK == 0:
                time.sleep(seconds)
            return function(*args, **kwargs)
        return call

    for name in ("autoanchor", "amp_speed", "check_amp", "plot_label_stats"):
        setattr(build, name, slowed(getattr(build, name), delays.get(name, 0.0)))


def writes_recorded() -> None:
    """Every checkpoint the trainer's hooks save and every image any plot writes in this process is written down."""
    def recorded(function, path_argument: int):
        def write(*args, **kwargs):
            RECORD["writes"].append(str(args[path_argument]))
            return function(*args, **kwargs)
        return write

    hooks.save_checkpoint = recorded(hooks.save_checkpoint, 0)
    cv2.imwrite = recorded(cv2.imwrite, 0)
    Figure.savefig = recorded(Figure.savefig, 1)


class ScalerLog(logging.Handler):
    """The NPU backend's log lines (torch_npu's GradScaler prints among them), into RECORD."""

    def emit(self, record: logging.LogRecord) -> None:
        RECORD["scaler_log"].append(record.getMessage())


def scaler_logged() -> None:
    logger = logging.getLogger("detect.backend.npu")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(ScalerLog())


def amp_disagrees() -> None:
    checked = build.check_amp
    build.check_amp = lambda *args: dataclasses.replace(checked(*args), nonfinite=1)


def amp_timed_at(speedup: float) -> None:
    """The AMP timing (amp_check.time_amp, under the real cache) measures bf16 `speedup` times as fast as fp32."""
    from detect.backend import amp_check

    amp_check.time_amp = lambda model, backend, batch_size, imgsz: amp_check.AmpSpeed(
        (1.0,), (1.0 / speedup,), "bf16", "CPU")


def save_always_due() -> None:
    def always_due(self, run, index, batch) -> None:
        run.control.save_asked = True

    hooks.TimedSave.before_step = always_due


def anchors(run) -> dict:
    return {"model": run.model.detect.anchors.tolist(), "loss": run.parts.criterion.anchors.tolist()}


class Witness(Hook):
    """On every rank, after the rank's own hooks: what this rank's run does; written out when it ends."""

    def __init__(self, records: str) -> None:
        self.path = Path(records, f"rank{RANK}.json")

    def before_train(self, run) -> None:
        RECORD.update(amp=run.backend.amp_enabled, scaler=run.parts.scaler.is_enabled(),
                      save_dir=str(run.folder.save_dir))
        RECORD["anchors"].append(anchors(run))
        RECORD["hooks"].append(["before_train", run.counters.epoch])

    def before_epoch(self, run, epoch) -> None:
        RECORD["hooks"].append(["before_epoch", epoch])

    def before_step(self, run, index, batch) -> None:
        RECORD["profiled"].append(torch.autograd._profiler_enabled())

    def after_step(self, run, index, step) -> None:
        if step.save_now:  # the main rank's Checkpointer has just written last.pt
            written = TrainingCheckpoint.load(run.folder.last_path).counters if run.context.is_main else None
            RECORD["saves"].append([run.counters.epoch, run.counters.batch, written and written.batch])

    def after_epoch(self, run, epoch, row) -> None:
        RECORD["hooks"].append(["after_epoch", epoch])
        RECORD["numerics"].append([epoch, row.get("train/nonfinite_grad_steps"), row.get("amp/loss_scale_last")])

    def after_train(self, run, metrics) -> None:
        standin = sys.modules.get("torch_npu")
        RECORD["npu_nms_v4"] = sum(call[0] == "npu_nms_v4" for call in standin.calls) if standin else None
        RECORD["anchors"].append(anchors(run))
        RECORD["hooks"].append(["after_train", run.counters.epoch])
        self.path.write_text(json.dumps(RECORD))


class Callback(Hook):
    """The user's callback, given to train.run on every rank: every call it gets."""

    def __init__(self, no_better_fitness: bool) -> None:
        self.no_better_fitness = no_better_fitness

    def before_train(self, run) -> None:
        RECORD["callbacks"].append(["before_train", run.counters.epoch])
        if self.no_better_fitness:
            run.counters.best_fitness, run.counters.best_epoch = UNREACHABLE_FITNESS, 0

    def before_epoch(self, run, epoch) -> None:
        RECORD["callbacks"].append(["before_epoch", epoch])

    def before_step(self, run, index, batch) -> None:
        RECORD["callbacks"].append(["before_step", index, len(batch)])

    def after_step(self, run, index, step) -> None:
        RECORD["callbacks"].append(["after_step", index])

    def after_epoch(self, run, epoch, row) -> None:
        RECORD["callbacks"].append(["after_epoch", epoch, row["epoch"], "metrics/mAP_0.5" in row])

    def after_train(self, run, metrics) -> None:
        RECORD["callbacks"].append(["after_train", metrics is not None])


def main(options_path: str, records: str, patches: list[str]) -> int:
    if "npu" in patches or "npu:warn" in patches:
        npu_standins_on_the_cpu("warn" if "npu:warn" in patches else "raise")
    main_rank_work({patch.split(":")[1]: float(patch.split(":")[2]) for patch in patches if patch.startswith("slow:")})
    writes_recorded()
    if "amp-disagrees" in patches:
        amp_disagrees()
    for patch in patches:
        if patch.startswith("amp-speed:"):
            amp_timed_at(float(patch.split(":", 1)[1]))
    if "save-due" in patches:
        save_always_due()
    if "scaler-log" in patches:
        scaler_logged()
    own_hooks = trainer.run_hooks
    trainer.run_hooks = lambda run, profile, callbacks, signals: HookList(
        run, [*own_hooks(run, profile, callbacks, signals).hooks, Witness(records)])
    options = json.loads(Path(options_path).read_text())
    profile = options.pop("profile", None)

    def body() -> None:
        train.run(profile=ProfileSchedule(*profile) if profile else None,
                  callbacks=[Callback("no-better-fitness" in patches)], **options)

    return cli.run(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
