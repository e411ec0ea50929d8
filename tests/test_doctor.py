"""`python -m detect.doctor`: a verdict on this machine, with the NPU stand-in, and with a broken torch_npu."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision

from detect import doctor
from detect.backend import environment, probe
from tests.npu_standin import install, write_broken_torch_npu, write_cann_toolkit

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def clean_environment(monkeypatch):
    """None of the variables the doctor reads, so the machine's own settings do not change the answers."""
    for name in [*environment.VARIABLES, "ASCEND_OPP_PATH"]:
        monkeypatch.delenv(name, raising=False)


def run_doctor(capsys) -> tuple[int, list[str]]:
    code = doctor.main([])
    return code, capsys.readouterr().out.splitlines()


def line_of(lines: list[str], topic: str) -> str:
    return next(line for line in lines if line.split()[1:2] == [topic])


def test_this_machine_is_ready_for_the_cpu(clean_environment, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: auto picks it")
    code, lines = run_doctor(capsys)
    assert code == 0
    assert lines[-1].startswith("verdict: ready, 0 warning(s); --device auto picks cpu")
    assert line_of(lines, "torch").split()[:3] == ["OK", "torch", torch.__version__]
    assert "pairs with torch 2." in line_of(lines, "torchvision")
    assert line_of(lines, "torch_npu").split()[0] == "INFO"


def test_with_the_npu_standin_auto_picks_the_npu(clean_environment, monkeypatch, tmp_path, capsys):
    # The doctor's own probe runs torchvision's nms on host tensors, which the stand-in (its tensors on the CPU) cannot
    # tell from NPU ones: its op check only records here (tests/npu_standin.py).
    install(monkeypatch, fallback="run")
    write_cann_toolkit(tmp_path / "latest", "9.1.0", monkeypatch)
    code, lines = run_doctor(capsys)
    assert code == 0, lines
    assert line_of(lines, "torch_npu").split()[:3] == ["OK", "torch_npu", "2.14.0"]
    assert line_of(lines, "CANN").split()[:3] == ["OK", "CANN", "9.1.0"]
    # 2.14.0 is newer than the COMPATIBILITY table's snapshot: unverified, not wrong (docs/torch-npu.md, "Versions")
    assert line_of(lines, "torch_npu+CANN").split()[0] == "WARN"
    assert line_of(lines, "NPU").split()[:6] == ["OK", "NPU", "op", "lists", "torch_npu", "2.14.0's"]
    assert line_of(lines, "NPUs").split()[2:] == ["1:", "Ascend910B3"]
    # The stand-in registers no process group; the real torch_npu registers hccl on import
    # (docs/torch-npu.md, "Distributed (HCCL)").
    assert line_of(lines, "hccl").split()[0] == "WARN"
    assert "--device auto picks npu (1 x Ascend910B3, no process group)" in lines[-1]


def test_the_standin_without_cann_is_a_problem(clean_environment, monkeypatch, capsys):
    install(monkeypatch, fallback="run")  # the host probe's torchvision nms (as above)
    code, lines = run_doctor(capsys)
    assert code == 1
    assert "ASCEND_HOME_PATH is not set" in line_of(lines, "CANN")
    assert lines[-1].startswith("verdict: NOT READY: 1 problem(s)")


def test_a_broken_torch_npu_gets_a_verdict(tmp_path):
    fake = write_broken_torch_npu(tmp_path / "site", "CANN package check failed:\n  opp is missing")
    env = {key: value for key, value in os.environ.items() if key not in environment.VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join([str(fake), str(REPO)])
    result = subprocess.run([sys.executable, "-m", "detect.doctor"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert line_of(lines, "torch_npu").endswith(
        "2.14.0 but import fails: Exception: CANN package check failed: opp is missing")
    assert lines[-1].startswith("verdict: NOT READY: 2 problem(s)") and "auto picks" in lines[-1]


def test_a_torchvision_for_another_torch_is_a_problem(clean_environment, monkeypatch, capsys):
    monkeypatch.setattr(torchvision, "__version__", "0.28.0")
    code, lines = run_doctor(capsys)
    assert code == 1
    assert line_of(lines, "torchvision").split()[0] == "FAIL"


@pytest.mark.parametrize("torch_version, paired", [("2.14.0", True), ("2.14.0+cpu", True), ("2.14.1", False),
                                                   ("2.13.0", False)])
def test_torch_npu_pins_its_torch(monkeypatch, torch_version, paired):
    monkeypatch.setattr(torch, "__version__", torch_version)
    # torch_npu 2.14.0's METADATA: Requires-Dist: torch==2.14.0.* (docs/torch-npu.md)
    assert probe._torch_pairing(["numpy", "torch==2.14.0.*"], "2.14.0")[0] is paired


@pytest.mark.parametrize("name, value, status", [
    ("HCCL_CONNECT_TIMEOUT", "60", "WARN"), ("HCCL_CONNECT_TIMEOUT", "600", "INFO"),
    ("HCCL_CONNECT_TIMEOUT", "2h", "WARN"), ("ASCEND_GLOBAL_LOG_LEVEL", "1", "WARN"),
    ("ASCEND_GLOBAL_LOG_LEVEL", "3", "INFO"), ("ASCEND_GLOBAL_LOG_LEVEL", "9", "WARN"),
    ("TASK_QUEUE_ENABLE", "0", "WARN"), ("TASK_QUEUE_ENABLE", "2", "INFO"), ("ASCEND_LAUNCH_BLOCKING", "1", "WARN"),
    ("RANK_TABLE_FILE", "/nonexistent/ranks.json", "WARN"),
    ("ASCEND_RT_VISIBLE_DEVICES", "0,1", "INFO"),
])
def test_environment_rules(name, value, status):
    (check,) = environment.environment_checks({name: value, "UNRELATED": "1"})
    assert (check.topic, check.status) == (name, status)
    assert bool(check.hint) == (status == "WARN")


def test_smi_tools_are_read_where_installed(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"nvidia-smi": "echo 'GPU 0: NVIDIA H200 (UUID: a)'; echo 'GPU 1: NVIDIA H200 (UUID: b)'",
               "npu-smi": "echo 'dcmi module initialize failed' >&2; exit 8"}
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    checks = {check.topic: check for check in probe.smi_checks()}
    assert (checks["nvidia-smi"].status, checks["nvidia-smi"].detail) == ("OK", "nvidia-smi -L: 2 device(s)")
    assert checks["npu-smi"].status == "FAIL"
    assert checks["npu-smi"].detail == "exit code 8: dcmi module initialize failed"


def test_an_unknown_flag_is_one_line(capsys):
    with pytest.raises(SystemExit) as caught:
        doctor.main(["--fix"])
    assert caught.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == ["error: unrecognized arguments: --fix"]
