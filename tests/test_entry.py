"""`python -m detect.*` keeps working when an installed torch_npu is broken (detect/__init__.py;
docs/torch-npu.md, "Autoload").

The fake torch_npu put on PYTHONPATH registers torch's autoload entry point as the real wheel does and raises a
bare Exception on import, as torch_npu's CANN package check does when the toolkit is broken.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.npu_standin import write_broken_torch_npu

REPO = Path(__file__).resolve().parent.parent
AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"


@pytest.fixture(scope="module")
def broken_npu_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a machine where torch_npu is installed but CANN is broken."""
    fake = write_broken_torch_npu(tmp_path_factory.mktemp("site"), "CANN package check failed:\n  opp is missing")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(REPO)])}
    env.pop(AUTOLOAD, None)
    return env


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def test_model_summary_runs_despite_a_broken_torch_npu(broken_npu_env, tmp_path):
    result = run(["-m", "detect.models", "--cfg", "yolov5n.yaml"], broken_npu_env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "yolov5n.yaml: 181 layers, 1,872,157 parameters" in result.stdout


def test_asking_for_the_npu_is_one_line(broken_npu_env, tmp_path):
    result = run(["-m", "detect.val", "--weights", "none.pt", "--device", "npu"], broken_npu_env, tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "torch_npu cannot be imported (Exception: CANN package check failed: opp is missing)" in lines[0]


def test_a_value_the_user_exported_wins(broken_npu_env, tmp_path):
    # This also shows the fake breaks torch as the real one does, so the tests above pass for the right reason.
    result = run(["-m", "detect.models", "--cfg", "yolov5n.yaml"], {**broken_npu_env, AUTOLOAD: "1"}, tmp_path)
    assert result.returncode != 0 and "Failed to load the backend extension: torch_npu" in result.stderr


def test_importing_detect_as_a_library_leaves_the_environment_alone(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != AUTOLOAD}
    code = f"import os, detect; print(os.environ.get({AUTOLOAD!r}))"
    assert run(["-c", code], env, tmp_path).stdout.strip() == "None"


@pytest.mark.parametrize(("exported", "expected"), [(None, "'PASSIVE'"), ("ACTIVE", "'ACTIVE'")])
def test_the_clis_make_torchs_threads_sleep_unless_told_otherwise(tmp_path, exported, expected):
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    if exported is not None:
        env["OMP_WAIT_POLICY"] = exported
    report = run(["-m", "detect.doctor"], env, tmp_path).stdout
    line = next(line for line in report.splitlines() if "OMP_WAIT_POLICY" in line)
    assert expected in line, report
    assert ("PASSIVE trains faster" in report) == (exported == "ACTIVE")
