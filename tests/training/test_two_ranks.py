"""What runs during training, at 2 ranks under torchrun (gloo on the CPU) and in one process: user callbacks,
--profile, early stopping that fires, --save-period, --save-minutes, AutoAnchor that replaces the yaml's anchors,
TensorBoard events and plots, in one run made twice on a CPU whose bf16 times slower (fp32); then the main rank's
start-up work (AutoAnchor, the AMP check on two NPU stand-ins, the AMP timing and check on a CPU whose bf16 times
faster, labels.png) made slower than --dist-timeout. Each rank writes down what it saw (tests/training/two_ranks_worker.py)."""

from __future__ import annotations

import collections
import csv
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from detect.config import CONFIGS_DIR
from detect.training.resume import TrainingCheckpoint
from tests.training.helpers import tiny_dataset

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
WORKER = str(Path(__file__).with_name("two_ranks_worker.py"))
EPOCHS = 4  # asked for; early stopping ends the run after STOPPED_AFTER
STOPPED_AFTER = 2  # --patience 1 with the best fitness out of reach from the first epoch on
STEPS = 2  # 8 images at a global batch of 4: two steps per epoch, in one process or on each of 2 ranks
PROFILE = [0, 1, 2]  # --profile WAIT WARMUP ACTIVE: the first epoch's two steps recorded
FAR_ANCHORS = [[300, 300, 320, 330, 340, 350]] * 3  # pixels, far above 64-px images' boxes: AutoAnchor replaces them
DIST_TIMEOUT = 5  # seconds: what the main rank's slowed start-up work outlasts
SLOWER = f"{DIST_TIMEOUT + 1}"  # seconds that work is made longer


@dataclasses.dataclass(frozen=True)
class Finished:
    """A finished job: its console, and what each rank wrote down (in rank order)."""

    output: str
    records: list[dict]

    @property
    def save_dir(self) -> Path:
        return Path(self.records[0]["save_dir"])

    @property
    def main(self) -> dict:
        return self.records[0]


def launch(options: dict, folder: Path, ranks: int, *patches: str) -> Finished:
    """two_ranks_worker.py with `options` and `patches`, as `ranks` ranks under torchrun or alone; it must end with 0."""
    folder.mkdir(parents=True)
    (folder / "options.json").write_text(json.dumps(options))
    (folder / "records").mkdir()
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)] if ranks > 1 else []
    command = [sys.executable, *launcher, WORKER, str(folder / "options.json"), str(folder / "records"), *patches]
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    finished = subprocess.run(command, env=environ, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=600, check=False)
    assert finished.returncode == 0, finished.stdout[-5000:]
    records = [json.loads(path.read_text()) for path in sorted((folder / "records").glob("rank*.json"))]
    assert [record["rank"] for record in records] == list(range(ranks))
    return Finished(finished.stdout, records)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[int, Finished]:
    """The same run in one process and as 2 ranks: far-off anchors, --profile, --patience 1 made to fire,
    --save-period 1, --save-minutes always due, on a CPU whose bf16 times 0.5x fp32 (faked, under the real cache)."""
    root = tmp_path_factory.mktemp("two_ranks")
    spec = yaml.safe_load((CONFIGS_DIR / "models" / "yolov5n.yaml").read_text())
    (root / "far_anchors.yaml").write_text(yaml.safe_dump({**spec, "anchors": FAR_ANCHORS}))
    options = {"cfg": str(root / "far_anchors.yaml"), "data": str(tiny_dataset(root / "data")), "imgsz": 64,
               "batch_size": 4, "epochs": EPOCHS, "workers": 0, "device": "cpu", "progress": False, "patience": 1,
               "save_period": 1, "save_minutes": 5, "profile": PROFILE}
    return {ranks: launch({**options, "project": str(root / f"runs{ranks}"), "cache_dir": str(root / f"cache{ranks}")},
                          root / f"job{ranks}", ranks, "save-due", "no-better-fitness", "amp-speed:0.5")
            for ranks in (1, 2)}


def test_callbacks_fire_in_order_on_the_writing_rank_only(runs):
    def expected(batch: int) -> list[list]:
        steps = [event for index in range(STEPS) for event in (["before_step", index, batch], ["after_step", index])]
        epochs = [[["before_epoch", epoch], *steps, ["after_epoch", epoch, epoch, True]] for epoch in range(STOPPED_AFTER)]
        return [["before_train", 0], *[event for epoch in epochs for event in epoch], ["after_train", True]]

    main, other = runs[2].records
    assert runs[1].main["callbacks"] == expected(batch=4)
    assert main["callbacks"] == expected(batch=2)  # each rank's share of the global batch
    assert other["callbacks"] == []  # the user's hooks run on the rank that writes the run (hooks.py), not elsewhere
    assert main["hooks"] == other["hooks"] == runs[1].main["hooks"]  # every rank went through the same epochs


def test_profile_traces_the_main_ranks_first_epoch_once(runs):
    main, other = runs[2].records
    first_epoch = [True] * STEPS + [False] * STEPS
    assert main["profiled"] == runs[1].main["profiled"] == first_epoch
    assert other["profiled"] == [False] * 2 * STEPS  # the other rank trains unprofiled: its steps are the same
    for finished in runs.values():
        assert len([path for path in (finished.save_dir / "profile").rglob("*") if path.is_file()]) == 1
        assert finished.output.count("data loading per recorded step:") == 1, finished.output


def test_early_stopping_ends_every_rank_after_the_same_epoch(runs):
    for finished in runs.values():
        for record in finished.records:
            begun = [event[1] for event in record["hooks"] if event[0] == "before_epoch"]
            assert begun == list(range(STOPPED_AFTER)) and record["hooks"][-1] == ["after_train", STOPPED_AFTER]
        with open(finished.save_dir / "results.csv") as handle:
            assert [int(row["epoch"]) for row in csv.DictReader(handle)] == list(range(STOPPED_AFTER))
        assert finished.output.count("stopping early: no improvement for 1 epochs (best: epoch 1)") == 1


def _written(finished: Finished, rank: int) -> collections.Counter:
    """The files rank `rank` wrote, relative to the run folder, and how many times (a library writes the writer's
    hidden temporary, .<name>.<12 hex>.tmp<suffix>, renamed to <name> once whole: detect/atomic_file)."""
    temporary = re.compile(r"(^|/)\.([^/]*)\.[0-9a-f]{12}\.tmp(\.[^./]*)?$")
    return collections.Counter(temporary.sub(r"\1\2", str(Path(path).relative_to(finished.save_dir)))
                               for path in finished.records[rank]["writes"])


def test_save_period_writes_each_epoch_once_on_the_main_rank(runs):
    for finished in runs.values():
        written = _written(finished, 0)
        assert [written[f"weights/epoch{epoch}.pt"] for epoch in range(1, STOPPED_AFTER + 2)] == [1] * STOPPED_AFTER + [0]
        weights = finished.save_dir / "weights"
        for epoch in range(1, STOPPED_AFTER + 1):
            assert TrainingCheckpoint.load(weights / f"epoch{epoch}.pt").counters.epoch == epoch
        last = TrainingCheckpoint.load(weights / "last.pt").model["state_dict"]
        final = TrainingCheckpoint.load(weights / f"epoch{STOPPED_AFTER}.pt").model["state_dict"]
        assert all(torch.equal(tensor, final[name]) for name, tensor in last.items())
    assert not runs[2].records[1]["writes"]  # nor any other file: only the main rank writes the run


def test_save_minutes_saves_inside_the_epoch_at_the_same_boundary_on_every_rank(runs):
    main, other = runs[2].records
    every_step = [[epoch, step, step] for epoch in range(STOPPED_AFTER) for step in range(1, STEPS + 1)]
    assert main["saves"] == runs[1].main["saves"] == every_step  # [epoch, batches done, last.pt's batches done]
    assert [save[:2] for save in other["saves"]] == [save[:2] for save in every_step]


def test_autoanchor_replaces_the_yaml_anchors_on_every_rank(runs):
    main, other = runs[2].records
    assert main["anchors"] == other["anchors"] == runs[1].main["anchors"]  # at the start and at the end
    for anchors in main["anchors"]:
        assert anchors["loss"] == anchors["model"]
    last = TrainingCheckpoint.load(runs[2].save_dir / "weights" / "last.pt").model["state_dict"]
    strides = torch.tensor([8.0, 16.0, 32.0]).view(-1, 1, 1)
    from_yaml = torch.tensor(FAR_ANCHORS).view(3, 3, 2) / strides
    saved = last[next(name for name in last if name.endswith("anchors"))]
    assert saved.tolist() == main["anchors"][-1]["model"] and not torch.allclose(saved, from_yaml)
    assert runs[2].output.count(": replaced by evolved anchors") == 1


def test_tensorboard_holds_every_epochs_scalars_in_one_events_file(runs):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = {}
    for ranks, finished in runs.items():
        (events,) = finished.save_dir.glob("events.out.tfevents.*")
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags[ranks] = accumulator.Tags()["scalars"]
        for tag in tags[ranks]:
            assert [event.step for event in accumulator.Scalars(tag)] == list(range(STOPPED_AFTER)), tag
    assert "metrics/mAP_0.5" in tags[2] and sorted(tags[2]) == sorted(tags[1])


def test_the_run_folder_holds_the_files_of_one_process_each_image_written_once(runs):
    def files(finished: Finished) -> set[str]:
        names = {str(path.relative_to(finished.save_dir)) for path in finished.save_dir.rglob("*") if path.is_file()}
        return {"events" if name.startswith("events.") else "trace" if name.startswith("profile/") else name
                for name in names}

    assert files(runs[2]) == files(runs[1])
    images = {name: count for name, count in _written(runs[2], 0).items() if name.endswith((".png", ".jpg"))}
    assert images == {name: 1 for name in files(runs[1]) if name.endswith((".png", ".jpg"))}
    assert {"labels.png", "train_batch0.jpg", "results.png", "PR_curve.png", "confusion_matrix.png"} <= images.keys()


def start_up_options(root: Path, device: str) -> dict:
    return {"cfg": "yolov5n.yaml", "data": str(tiny_dataset(root / "data")), "imgsz": 64, "batch_size": 4,
            "epochs": 1, "workers": 0, "device": device, "cpu_affinity": "none", "progress": False,
            "dist_timeout": DIST_TIMEOUT, "project": str(root / "runs")}


@pytest.fixture(scope="module")
def slow_amp_check(tmp_path_factory) -> Finished:
    """2 ranks on NPU stand-ins, AMP on by default: the main rank's AMP check outlasts --dist-timeout, and its verdict
    is made a disagreement."""
    root = tmp_path_factory.mktemp("slow_amp_check")
    return launch(start_up_options(root, "npu"), root / "job", 2, "npu", f"slow:check_amp:{SLOWER}", "amp-disagrees")


def test_the_amp_check_runs_on_the_main_rank_and_its_verdict_reaches_every_rank(slow_amp_check):
    # Before the fix the other rank waited in the verdict's broadcast and ended: "waited 5 s (--dist-timeout)".
    main, other = slow_amp_check.records
    assert main["calls"] == ["autoanchor", "check_amp", "plot_label_stats"] and other["calls"] == []
    for record in slow_amp_check.records:  # the other rank never checked, yet trains in fp32 too
        assert (record["amp"], record["scaler"]) == (False, False), record["rank"]
    assert slow_amp_check.output.count("AMP check: autocast's predictions differ from fp32's") == 1  # not per rank
    assert [event[0] for event in other["hooks"]] == ["before_train", "before_epoch", "after_epoch", "after_train"]


def test_autoanchor_and_labels_png_longer_than_dist_timeout_are_waited_for(tmp_path):
    # Before the fix the other rank waited in DDP's first broadcast (AutoAnchor) or the first step's (labels.png), and
    # ended: "waited 5 s (--dist-timeout)". The hyp's `anchors` (yolov5's hyp key) asks AutoAnchor for 4 per level.
    # The CPU's bf16 times 1.5x fp32 (faked), longer than --dist-timeout: bf16 AMP by default, timed and checked on
    # the main rank, chosen on both.
    hyp = tmp_path / "hyp.yaml"
    hyp.write_text("anchors: 4.4\n")
    finished = launch({**start_up_options(tmp_path, "cpu"), "hyp": str(hyp), "cache_dir": str(tmp_path / "cache")},
                      tmp_path / "job", 2, f"slow:autoanchor:{SLOWER}", f"slow:amp_speed:{SLOWER}",
                      f"slow:plot_label_stats:{SLOWER}", "amp-speed:1.5")
    main, other = finished.records
    assert main["anchors"] == other["anchors"] and main["anchors"][0]["model"] == main["anchors"][0]["loss"]
    assert [len(level) for level in main["anchors"][0]["model"]] == [4, 4, 4]  # the hyp's 4.4, rounded as yolov5 does
    assert main["calls"] == ["autoanchor", "amp_speed", "check_amp", "plot_label_stats"] and other["calls"] == []
    for record in finished.records:  # bf16 autocast needs no loss scaling
        assert (record["amp"], record["scaler"]) == (True, False), record["rank"]
    assert finished.output.count("precision: bf16 autocast (bf16 measured 1.50x fp32 on this CPU; --no-amp for "
                                 "fp32)") == 1
    assert len(list((tmp_path / "cache" / "amp_speed").glob("*.json"))) == 1  # kept once, by the main rank
    assert [event[0] for event in other["hooks"]] == ["before_train", "before_epoch", "after_epoch", "after_train"]
    assert (finished.save_dir / "labels.png").is_file()


def test_a_cpu_whose_bf16_times_slower_trains_fp32_unchecked_on_every_rank(runs):
    for ranks, finished in runs.items():  # timed on the main rank alone, its verdict on every rank
        assert [(record["amp"], record["scaler"]) for record in finished.records] == [(False, False)] * ranks
        assert finished.main["calls"][:2] == ["autoanchor", "amp_speed"] and "check_amp" not in finished.main["calls"]
        assert all(record["calls"] == [] for record in finished.records if record is not finished.main)
        assert finished.output.count("precision: fp32 (bf16 measured 0.50x fp32 on this CPU; --amp forces it)") == 1


def test_a_cpu_run_resumes_on_two_npus_with_torch_npus_scaler_logged(tmp_path, monkeypatch):
    """A CPU run stopped in its second epoch resumes on two NPU stand-ins (fp16 AMP, torch_npu's GradScaler, whose
    state a CPU run leaves empty), at a loss scale so large that every step overflows. In INF_NAN mode torch_npu's
    scaler decides each rank alone (no all-reduce: tests/npu_scaler_standin.py): both ranks skip the same steps, each
    says so in its log (not through the progress bar), and the numerics line counts them on every rank. The job has
    ACL_OP_INIT_MODE=2 (npu_nms_v4 refused) and --nms-device cpu: its validation suppresses on the host."""
    import signal

    from detect import train
    from detect.training import hooks

    hyp = tmp_path / "hyp.yaml"
    hyp.write_text("amp_init_scale: 3.0e+38\n")  # the first fp16 steps overflow at any loss above 1.2
    steps = []

    def stop_at_the_third_step(self, run, index, batch) -> None:
        steps.append(index)
        if len(steps) >= 3:
            run.control.stop_signal = signal.SIGTERM

    monkeypatch.setattr(hooks.SignalStop, "before_step", stop_at_the_third_step)
    data = tiny_dataset(tmp_path / "data")  # 2 steps an epoch: stopped at the start of epoch 2's second
    assert train.main(["--cfg", "yolov5n.yaml", "--data", str(data), "--imgsz", "64", "--batch-size", "4", "--epochs",
                       "2", "--workers", "0", "--device", "cpu", "--hyp", str(hyp), "--project", str(tmp_path / "runs"),
                       "--noval", "--noplots", "--no-progress"]) == 143
    monkeypatch.undo()
    monkeypatch.setenv("ACL_OP_INIT_MODE", "2")
    finished = launch({"resume": str(tmp_path / "runs" / "exp"), "device": "npu", "workers": 0, "progress": False,
                       "cpu_affinity": "none", "nms_device": "cpu"}, tmp_path / "job", 2, "npu:warn", "scaler-log")
    skipped = []
    for record in finished.records:
        assert (record["amp"], record["scaler"]) == (True, True), record["rank"]
        lines = [line for line in record["scaler_log"] if line.startswith("torch_npu's GradScaler: ")]
        skipped.append(lines.count("torch_npu's GradScaler: Gradient overflow. Skipping step"))
        assert record["numerics"][-1][:2] == [1, skipped[-1]], record  # epoch 2 (index 1): every skip counted
    assert skipped[0] == skipped[1] == 1  # the step left of epoch 2, on each rank
    assert "Gradient overflow. Skipping step" not in finished.output.splitlines()  # no bare print
    assert "had no fp16 loss scaling" in finished.output
    assert finished.main["npu_nms_v4"] == finished.records[1]["npu_nms_v4"] == 0  # validated, NMS on the host
    assert "mAP50-95" in finished.output
    resumed = TrainingCheckpoint.load(tmp_path / "runs" / "exp" / "weights" / "last.pt")
    assert resumed.counters.epoch == 2 and resumed.scaler["dynamic"] is True
