"""Markers given by where a test lives."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent
# Model outputs, loss, NMS, evaluator and exports compared with references within float32 tolerances, whose last bits
# follow the thread count: CI runs them a second time under OMP_NUM_THREADS=1 (`-m numeric`).
NUMERIC = ("training/test_loss.py", "ops/", "evaluation/", "inference/", "models/", "exporters/", "test_export.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.relative_to(TESTS).as_posix().startswith(NUMERIC):
            item.add_marker(pytest.mark.numeric)
