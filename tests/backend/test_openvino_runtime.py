"""OpenVINO is imported without its telemetry (no client id written under $HOME, ovc left on its no-op stub), or
named in one line when it is missing; its one Core keeps the process alive through signals."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from detect.backend.openvino_runtime import import_openvino
from detect.errors import UserError

# A bare `import openvino` (2026.4) writes $HOME/intel/openvino_ga_cid and queues an event for Google Analytics;
# the check runs in a fresh process (the import happens once a process) and never makes a bare import itself.
IMPORT = """
import sys
from detect.backend.openvino_runtime import import_openvino
openvino = import_openvino("the test")
from openvino.tools.ovc import telemetry_utils
print(telemetry_utils.tm.__name__, "openvino_telemetry" in sys.modules)
"""


# find_spec, not importorskip: importorskip's bare `import openvino` would send the telemetry.
OPENVINO = importlib.util.find_spec("openvino") is not None
# Two models compiled, freed in the order they came, then a Python signal handler runs: with a Core each, OpenVINO's
# CPU plugin leaves the main thread on a freed alternate signal stack and the handler dies with SIGSEGV (seen with
# openvino 2026.4); through the one shared Core the process lives.
TWO_MODELS = """
import os, signal
import numpy as np
from detect.backend.openvino_runtime import import_openvino, shared_core
openvino = import_openvino("the test")
images = openvino.opset13.parameter([1, 3, 8, 8], np.float32)
model = openvino.Model([openvino.opset13.relu(images)], [images])
first = shared_core("the test").compile_model(model, "CPU")
second = shared_core("the test").compile_model(model, "CPU")
del first, second
signal.signal(signal.SIGUSR1, lambda *args: print("handled"))
os.kill(os.getpid(), signal.SIGUSR1)
"""


@pytest.mark.skipif(not OPENVINO, reason='OpenVINO is optional (pip install "detect-trainer[openvino]")')
def test_openvino_is_imported_with_its_telemetry_stubbed_and_nothing_written_home(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("CI", None)  # openvino_telemetry stays quiet in CI on its own; the guard must not depend on it
    result = subprocess.run([sys.executable, "-c", IMPORT], capture_output=True, text=True, env=env, check=True)
    assert result.stdout.split() == ["openvino.tools.ovc.telemetry_stub", "False"]
    assert not (tmp_path / "intel").exists()


def test_a_missing_openvino_is_named_with_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # None: `import openvino` raises ImportError
    with pytest.raises(UserError, match=r'--include openvino needs openvino: pip install "detect-trainer\[openvino\]"'):
        import_openvino("--include openvino")
    assert sys.modules.get("openvino_telemetry", "absent") is not None  # the package is hidden only during the import


@pytest.mark.skipif(not sys.platform.startswith("linux") or not OPENVINO, reason="POSIX signals and OpenVINO")
def test_models_of_the_one_core_freed_in_any_order_leave_signal_handling_working():
    result = subprocess.run([sys.executable, "-c", TWO_MODELS], check=False, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "handled", (result.returncode, result.stderr[-500:])
