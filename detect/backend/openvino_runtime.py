"""OpenVINO, the runtime of OpenVINO exports: imported without its telemetry, one Core for the process (exporters and
inference share it)."""

from __future__ import annotations

import functools
import importlib
import sys
from types import ModuleType

from detect.errors import UserError

# `import openvino` runs openvino/tools/ovc/__init__.py, which sends an "import" event to Google Analytics through
# the openvino_telemetry package and writes a client id to ~/intel/ unless the user has opted out (openvino 2026.4,
# read in its source; seen here as ~/intel/openvino_ga_cid after a bare import). ovc falls back to its own no-op stub
# when openvino_telemetry cannot be imported, so the import below hides that package: we never reach the network.
TELEMETRY_PACKAGE = "openvino_telemetry"
# An export keeps its metadata in the IR as rt_info["detect"][key], each value the JSON text of its ONNX's metadata.
RT_INFO_SECTION = "detect"
FOLDER_SUFFIX = "_openvino_model"  # an export's folder, <stem>_openvino_model/<stem>.xml (ultralytics' layout)


def import_openvino(purpose: str) -> ModuleType:
    """The openvino package, imported with its telemetry off; `purpose` ("running x.xml") names the need when it is
    missing. A process that imported openvino before keeps that import as it is."""
    return _import_without_telemetry("openvino", purpose, "openvino")


def import_nncf(purpose: str) -> ModuleType:
    """NNCF (OpenVINO's post-training quantization), imported with its telemetry off as openvino's (nncf 3.4 sends
    events through the same openvino_telemetry package when it can import it)."""
    import_openvino(purpose)
    return _import_without_telemetry("nncf", purpose, "openvino")


def _import_without_telemetry(name: str, purpose: str, extra: str) -> ModuleType:
    hidden = TELEMETRY_PACKAGE not in sys.modules
    if hidden:
        sys.modules[TELEMETRY_PACKAGE] = None  # type: ignore[assignment]  # None: `import` raises ImportError
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise UserError(f'{purpose} needs {name}: pip install "detect-trainer[{extra}]" ({error})') from None
    finally:
        if hidden:
            del sys.modules[TELEMETRY_PACKAGE]


def shared_core(purpose: str):
    """The process's one openvino.Core, made on first use and kept; `purpose` as for import_openvino.

    OpenVINO's CPU plugin (2026.4) gives the main thread an alternate signal stack when a Core first compiles, and
    when that Core goes it puts back the stack it found: two Cores that go in the order they came leave the thread
    on the first one's freed stack, and the next Python signal handler (SIGCHLD from a DataLoader worker) kills the
    process with SIGSEGV (seen in the tests after two IRs were loaded; tests/backend/test_openvino_runtime.py).
    One Core that never goes sets that stack once.
    """
    return _core(import_openvino(purpose))


@functools.cache
def _core(openvino: ModuleType):
    return openvino.Core()
