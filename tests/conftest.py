"""Markers given by where a test lives, and the tiny checkpoint and static exports that the export and
inference tests share (a module that needs another checkpoint defines its own `weights`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from detect import atomic_file
from tests.exporters.helpers import static_exports_of, tiny_weights
from tests.shared_data import ABSENT_REASON, SHARED_PRESENT, coco128_layout

TESTS = Path(__file__).parent
# Model outputs, loss, NMS, evaluator and exports compared with references within float32 tolerances, whose last bits
# follow the thread count: CI runs them a second time under OMP_NUM_THREADS=1 (`-m numeric`).
NUMERIC = ("training/test_loss.py", "ops/", "evaluation/", "exporters/", "test_export.py", "models/test_head.py",
           "models/test_zoo.py", "inference/test_tta.py", "inference/test_model.py")
# Files in those folders that check refusals or memory, no float within a tolerance: run once.
NOT_NUMERIC = ("inference/test_model.py::test_cpu_inference_and_training_reuse_freed_memory",)
# Tests that time how fast processes react (a stop within seconds, a silent node noticed, a hang reported, cores
# placed): CI runs them after the others, alone on the machine (`-m serial`), the others on two workers.
SERIAL = ("training/test_stop_anywhere.py", "training/test_multinode.py", "training/test_preemption.py",
          "training/test_scenario.py", "training/test_collective_failure.py", "backend/test_placement.py",
          "serve/test_slow_clients.py", "tracking/test_tracked_stop.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.relative_to(TESTS).as_posix()
        if path.startswith(NUMERIC) and not f"{path}::{item.name}".startswith(NOT_NUMERIC):
            item.add_marker(pytest.mark.numeric)
        if path.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
    # Modules with slow tests first, each module's tests together: CI's two workers take whole modules
    # (--dist loadscope: a module's fixtures are made once), the long ones first and the short ones last, so that
    # neither worker waits long for the other at the end.
    slow_modules = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_modules)


@pytest.fixture(autouse=True)
def npu_op_checks_end_with_the_test():
    """The op checks that the NPU stand-in began in a test (tests/npu_standin.py, install) end with it."""
    yield
    standin = sys.modules.get("tests.npu_standin")
    if standin is not None:
        standin.leave_checks()


@pytest.fixture(autouse=True)
def each_test_one_command():
    """A test is one command: the sources it registers in this process (atomic_file.protect) end with it."""
    with atomic_file.command():
        yield


@pytest.fixture(scope="session", autouse=True)
def user_cache_of_the_session(tmp_path_factory):
    """The user cache (label caches of read-only data such as the shared coco128, the built-in dataset) in a folder of
    the test session, for the tests and the processes they start: never the developer's ~/.cache, and never moved
    by a DETECT_CACHE_DIR or DETECT_DATA_DIR in their shell."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    patch.delenv("DETECT_CACHE_DIR", raising=False)
    patch.delenv("DETECT_DATA_DIR", raising=False)
    yield
    patch.undo()


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """An untrained 3-class yolov5n checkpoint (tests/exporters/helpers.py)."""
    return tiny_weights(tmp_path_factory.mktemp("weights"))


@pytest.fixture(scope="module")
def static_exports(weights, tmp_path_factory) -> dict[str, Path]:
    """TorchScript and a static ONNX of `weights`."""
    return static_exports_of(weights, tmp_path_factory.mktemp("static"))


@pytest.fixture
def coco128_workdir(tmp_path, monkeypatch) -> Path:
    """A working folder with ../datasets/coco128 beside it (yolov5's layout, a link to the shared coco128), made the
    current folder, so that `--data coco128.yaml` finds the data as a user's checkout does."""
    if not SHARED_PRESENT:
        pytest.skip(ABSENT_REASON)
    work = coco128_layout(tmp_path)
    monkeypatch.chdir(work)
    return work
