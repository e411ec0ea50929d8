"""scripts/make_large_dataset.py as a module (scripts/ is no package), for the tests that generate small sets."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_large_dataset.py"


def generator() -> ModuleType:
    """The script's module, registered in sys.modules so that its process pool can pickle its functions."""
    if "make_large_dataset" not in sys.modules:
        spec = importlib.util.spec_from_file_location("make_large_dataset", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["make_large_dataset"] = module
        spec.loader.exec_module(module)
    return sys.modules["make_large_dataset"]
