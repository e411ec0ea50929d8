"""The checkpoint and the static exports the exporter tests share (one per module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.exporters.helpers import static_exports_of, tiny_weights


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    return tiny_weights(tmp_path_factory.mktemp("weights"))


@pytest.fixture(scope="module")
def static_exports(weights, tmp_path_factory) -> dict[str, Path]:
    return static_exports_of(weights, tmp_path_factory.mktemp("static"))
