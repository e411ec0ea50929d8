"""evolve(): trials of real and stand-in training runs, outputs, failed and interrupted trials, resume of a study,
bad input before the first trial, and two processes sharing one study."""

from __future__ import annotations

import csv
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from detect.config import load_hyp
from detect.errors import Interrupted, UserError
from detect.evolution import evolve
from detect.evolution import optuna_study as study_module
from detect.evolution import trials as trials_module
from detect.training.settings import TrainSettings
from tests.training.helpers import tiny_dataset

optuna = pytest.importorskip("optuna", reason="--evolve needs the evolve extra")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny"))


def settings_for(dataset: Path, project: Path, **changes) -> TrainSettings:
    """yolov5n at 64 px for 1 epoch on the CPU: a trial takes a few seconds."""
    settings = TrainSettings(cfg="yolov5n.yaml", data=str(dataset), imgsz=64, epochs=1, batch_size=4, workers=0,
                             device="cpu", project=str(project), name="study", progress=False)
    return dataclasses.replace(settings, **changes)


def rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "evolve.csv") as handle:
        return list(csv.DictReader(handle))


class StandIn:
    """Replaces Trainer: a fitness from the trial's hyp file at once; `breaks` maps a call number to what it raises."""

    def __init__(self, breaks: dict[int, BaseException] | None = None, delay: float = 0.0) -> None:
        self.breaks, self.delay, self.calls = breaks or {}, delay, []

    def __call__(self, settings: TrainSettings) -> SimpleNamespace:
        self.calls.append(settings)
        return SimpleNamespace(fit=lambda: self.fit(len(self.calls) - 1, settings))

    def fit(self, call: int, settings: TrainSettings) -> SimpleNamespace:
        weights = Path(settings.project) / settings.name / "weights"
        weights.mkdir(parents=True, exist_ok=True)
        (weights / "last.pt").write_bytes(b"")  # as the Trainer leaves them, also when a run fails or is stopped
        if call in self.breaks:
            raise self.breaks[call]
        time.sleep(self.delay)
        lr0 = load_hyp(settings.hyp).lr0
        metrics = SimpleNamespace(precision=0.5, recall=0.5, map50=lr0, map50_95=lr0, fitness=lr0)
        return SimpleNamespace(metrics=metrics)


def test_real_trials_write_the_outputs_and_a_study_continues(data, tmp_path):
    settings = settings_for(data, tmp_path)
    first = evolve(settings, 1)
    assert first.trials == 1 and first.folder == tmp_path / "study" and (first.folder / "study.db").is_file()
    result = evolve(settings, 2)  # started again with more trials: continues the study
    assert result.trials == 2 and [row["trial"] for row in rows(result.folder)] == ["0", "1"]
    assert all(row["state"] == "complete" and 0 <= float(row["fitness"]) <= 1 for row in rows(result.folder))
    assert load_hyp(result.folder / "trial0" / "hyp.yaml") == load_hyp(settings.hyp)  # the first trial: --hyp
    assert load_hyp(result.best_hyp) == load_hyp(result.folder / f"trial{result.best_trial}" / "hyp.yaml")
    assert result.plot.is_file() and (result.folder / "trial1" / "results.csv").is_file()
    config = (result.folder / "trial1" / "config.yaml").read_text()
    assert "noval: true" in config and "nosave: true" in config
    assert not list(result.folder.rglob("*.pt"))  # trials keep no weights: the study yields hyps


def test_a_failed_trial_is_failed_and_the_study_goes_on(data, tmp_path, monkeypatch):
    stand_in = StandIn({1: UserError("the loss was not finite for 10 steps: the run diverged")})
    monkeypatch.setattr(trials_module, "Trainer", stand_in)
    result = evolve(settings_for(data, tmp_path), 4)
    assert result.trials == 4 and len(stand_in.calls) == 4
    assert [row["state"] for row in rows(result.folder)] == ["complete", "failed", "complete", "complete"]
    assert "not finite" in rows(result.folder)[1]["error"]
    assert not list(result.folder.rglob("*.pt"))
    study = optuna.load_study(study_name="study", storage=f"sqlite:///{result.folder / 'study.db'}")
    assert study.trials[1].state == optuna.trial.TrialState.FAIL


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), Interrupted("stopped at epoch 1", signal.SIGTERM)])
def test_an_interrupted_study_continues_to_its_number_of_trials(data, tmp_path, monkeypatch, stop):
    stand_in = StandIn({2: stop})
    monkeypatch.setattr(trials_module, "Trainer", stand_in)
    settings = settings_for(data, tmp_path)
    with pytest.raises(type(stop)) as stopped:
        evolve(settings, 4)
    if isinstance(stop, Interrupted):  # the Trainer's signal stop: the study stops with the same exit code
        assert "evolve stopped during trial 2" in str(stopped.value) and stopped.value.exit_code == 143
    assert not list(tmp_path.rglob("*.pt"))  # not even of the trial cut short
    cut_short = load_hyp(stand_in.calls[2].hyp)
    result = evolve(settings, 4)
    hyps = [load_hyp(settings.hyp) for settings in stand_in.calls]
    assert result.trials == 4 and len(stand_in.calls) == 5 and hyps[3] == cut_short  # its hyp ran again, first
    assert len(rows(result.folder)) == 4


@pytest.mark.parametrize("sampler", ["cmaes", "random"])
def test_other_samplers(data, tmp_path, monkeypatch, sampler):
    pytest.importorskip("cmaes") if sampler == "cmaes" else None
    monkeypatch.setattr(trials_module, "Trainer", StandIn())
    result = evolve(settings_for(data, tmp_path), 3, sampler=sampler)
    assert result.trials == 3 and len({row["lr0"] for row in rows(result.folder)}) == 3


@pytest.mark.parametrize(("changes", "call", "message"), [
    ({"data": "missing.yaml"}, {}, "missing.yaml"),
    ({"cfg": None}, {}, "give a model"),
    ({"hyp": "nothing.yaml"}, {}, "nothing.yaml"),
    ({}, {"sampler": "grid"}, "--evolve-sampler 'grid'"),
    ({}, {"storage": "nosuchdb://x"}, "--evolve-storage nosuchdb://x"),
])
def test_bad_flags_fail_before_the_first_trial(data, tmp_path, monkeypatch, changes, call, message):
    stand_in = StandIn()
    monkeypatch.setattr(trials_module, "Trainer", stand_in)
    settings = settings_for(data, tmp_path, **changes)
    with pytest.raises(UserError, match=message):
        evolve(settings, 2, **call)
    assert not stand_in.calls


def test_a_study_refuses_other_settings(data, tmp_path, monkeypatch):
    monkeypatch.setattr(trials_module, "Trainer", StandIn())
    evolve(settings_for(data, tmp_path), 1)
    with pytest.raises(UserError, match="other settings .*imgsz"):
        evolve(settings_for(data, tmp_path, imgsz=96), 2)


def test_without_optuna_one_line_says_what_to_install(data, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(UserError, match=r"--evolve needs optuna: pip install 'detect-trainer\[evolve\]'"):
        evolve(settings_for(data, tmp_path), 2)


def test_two_processes_share_one_study_and_run_each_trial_once(data, tmp_path):
    # Each process trains with the stand-in (a trial takes 0.2 s, so the two race for every trial), on the default
    # storage: the SQLite database both open in the study folder.
    script = textwrap.dedent(f"""
        from detect.evolution import evolve, trials
        from detect.training.settings import TrainSettings
        from tests.evolution.test_evolve import StandIn
        trials.Trainer = StandIn(delay=0.2)
        settings = TrainSettings(cfg="yolov5n.yaml", data={str(data)!r}, device="cpu", project={str(tmp_path)!r},
                                 name="shared")
        evolve(settings, 6)
    """)
    processes = [subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
    errors = [process.communicate(timeout=120)[1] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], errors
    table = rows(tmp_path / "shared")
    assert [row["trial"] for row in table] == ["0", "1", "2", "3", "4", "5"]  # none lost, none extra
    assert len({row["lr0"] for row in table}) == 6  # none run twice
    assert len({row["worker"] for row in table}) == 2  # both processes ran trials


def test_the_trial_of_a_killed_process_runs_again(data, tmp_path, monkeypatch):
    # A process dies (kill -9) during its first trial, the start hyp; once its heartbeat is 2 s stale, the next
    # process fails that trial and runs its hyp again: the study holds 2 trials, one of them the start hyp.
    script = textwrap.dedent(f"""
        from detect.evolution import evolve, optuna_study, trials
        from detect.training.settings import TrainSettings
        from tests.evolution.test_evolve import StandIn
        optuna_study.HEARTBEAT_SECONDS, optuna_study.GRACE_SECONDS = 1, 2
        trials.Trainer = StandIn(delay=600)
        evolve(TrainSettings(cfg="yolov5n.yaml", data={str(data)!r}, imgsz=64, epochs=1, batch_size=4, workers=0,
                             device="cpu", project={str(tmp_path)!r}, name="study", progress=False), 2)
    """)
    process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    database = f"sqlite:///{tmp_path / 'study' / 'study.db'}"
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "study" / "trial0" / "hyp.yaml").is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        process.kill()
        process.wait()
    monkeypatch.setattr(study_module, "GRACE_SECONDS", 2)
    monkeypatch.setattr(trials_module, "Trainer", StandIn())
    result = evolve(settings_for(data, tmp_path), 2)
    table = rows(result.folder)
    assert result.trials == 2 and [row["trial"] for row in table] == ["1", "2"]  # one of them: trial 0 again
    assert load_hyp("scratch-low.yaml").lr0 in [float(row["lr0"]) for row in table]
    states = [trial.state for trial in optuna.load_study(study_name="study", storage=database).trials]
    assert states[0] == optuna.trial.TrialState.FAIL
    assert not list(result.folder.rglob("*.pt"))  # nor the killed trial's, once it is failed


def test_a_missing_val_folder_fails_before_the_first_trial(data, tmp_path, monkeypatch):
    stand_in = StandIn()
    monkeypatch.setattr(trials_module, "Trainer", stand_in)
    broken = tmp_path / "no_val.yaml"
    broken.write_text(data.read_text().replace("val: images/train", "val: images/gone"))
    with pytest.raises(UserError, match=r"no_val\.yaml: 'val' names .*images/gone, which does not exist"):
        evolve(settings_for(broken, tmp_path), 2)
    assert not stand_in.calls


def test_evolve_on_a_device_list_is_refused_in_one_line(data, tmp_path, capsys):
    from detect import train

    args = ["--cfg", "yolov5n.yaml", "--data", str(data), "--device", "0,1", "--evolve", "2", "--project",
            str(tmp_path)]
    assert train.main(args) == 2
    assert capsys.readouterr().err == ("error: --evolve runs each trial in one process, not on --device 0,1: start one "
                                       "process per device (--device N), each with the same command, and they share "
                                       "the study\n")
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_evolve_under_torchrun_is_refused_before_any_trial(data, tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "detect.train", "--cfg", "yolov5n.yaml", "--data", str(data), "--imgsz", "64", "--epochs", "1",
               "--device", "cpu", "--evolve", "2", "--project", str(tmp_path / "runs")]
    finished = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0
    # Each rank refuses alone; torchrun may end the second with SIGTERM once the first has exited, before it prints.
    assert output.count("error: --evolve runs each trial in one process, not on 2 torchrun ranks: ") in (1, 2), output
    assert not (tmp_path / "runs").exists()  # no study, no trial
