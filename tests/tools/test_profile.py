"""python -m detect.train --profile and python -m detect.tools.profile: a trace in the run folder, its summary."""

from __future__ import annotations

import json
import logging

import pytest

from detect import train
from detect.backend.profiler import find_trace
from detect.tools import profile
from tests.training.helpers import tiny_dataset, train_args


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("tiny"), count=16)  # 4 batches of 4 in the first epoch


@pytest.fixture(scope="module")
def profiled_run(data, tmp_path_factory):
    """One epoch with --profile 1 1 2 (wait, warmup, active), and what it logged."""
    project = tmp_path_factory.mktemp("runs")
    records = []
    handler = logging.Handler()  # caplog is per test; this run is shared by the module
    handler.emit = lambda record: records.append(record.getMessage())
    root, level = logging.getLogger(), logging.getLogger().level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # basicConfig leaves the level alone once a handler exists
    try:
        assert train.main(train_args(data, project, "--profile", "1", "1", "2", epochs=1)) == 0
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    return project / "exp", "\n".join(records)


def test_the_trace_is_json_in_the_run_folder_and_names_conv_ops(profiled_run):
    run_dir, _ = profiled_run
    trace = find_trace(run_dir / "profile")
    names = {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}
    assert {"aten::conv2d", "aten::convolution_backward"} <= names
    assert sum(name.startswith("ProfilerStep#") for name in names if name) == 2  # the two active steps
    assert (run_dir / "train_batch2.jpg").is_file()  # the first batches are still plotted


def test_the_summary_is_logged(profiled_run):
    _, logged = profiled_run
    assert "top 10 host operators by self time" in logged
    assert "data loading per recorded step:" in logged
    assert logged.count("waiting for data") == 2


def test_the_tool_reads_the_run_folder(profiled_run, capsys):
    run_dir, _ = profiled_run
    assert profile.main([str(run_dir), "--top", "3"]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == f"trace: {find_trace(run_dir / 'profile')} (open it in ui.perfetto.dev; " \
                                      "TensorBoard reads its folder)"
    assert printed.count("waiting for data") == 2 and "top 3 host operators" in printed


def test_a_schedule_longer_than_the_epoch_only_warns(data, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert train.main(train_args(data, tmp_path, "--profile", "10", "1", "3", epochs=1)) == 0
    assert "--profile: no profiler trace in" in caplog.text and "the schedule needs 14" in caplog.text


@pytest.mark.parametrize("argv, message", [
    (["--profile", "1", "2"], "--profile takes no value or three (WAIT WARMUP ACTIVE), got 2"),
    (["--profile", "1", "1", "0"], "ACTIVE >= 1"),
    (["--profile", "-1"], "argument --profile: must be an integer >= 0, got '-1'"),
])
def test_bad_profile_flags_are_one_line(data, tmp_path, capsys, argv, message):
    try:
        code = train.main(train_args(data, tmp_path, *argv, epochs=1))
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]


def test_the_tool_names_a_missing_path(tmp_path, capsys):
    assert profile.main([str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'nothing'}: no such file or folder"
