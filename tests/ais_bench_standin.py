"""A CPU stand-in for ais_bench's InferSession (ais_bench.infer.interface), enforcing the calls detect makes of it.

The signatures follow ais_bench/infer/interface.py of Huawei's ait (components/benchmark): InferSession(device_id,
model_path, acl_json_path=None, debug=False, loop=1); get_inputs() / get_outputs() return descriptions with name,
shape and datatype (an aclDataType code: 0 float32, 1 float16); infer(feeds, mode="static", custom_sizes=100000,
out_array=True) returns a list of numpy arrays; free_resource(). Nothing here ran on an NPU.

The stand-in's ".om" is an ONNX file under another name (fake_atc writes it so); it runs in onnxruntime, and
declares its input and float outputs in `io_dtype` (float16 as ATC makes them with --input_fp16_nodes and
--output_type=FP16; float32 is ATC's default), so feeding another dtype or shape fails as a static .om's would.

Its ACL calls follow aclruntime's sources (Ascend/tools ais-bench_workload/tool/ais_bench/backend at 9d6da90f,
tests/acl_standin.py): aclInit again where torch_npu has initialised ACL (it prints the error and goes on), a context of
its own made current on the calling thread, made current again by every inference and by free_resource().
"""

from __future__ import annotations

import enum
import stat
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import onnxruntime
import pytest

from tests import acl_standin


class AclDataType(enum.IntEnum):
    """aclruntime's dtype values are aclDataType codes (CANN acl_base.h)."""

    ACL_FLOAT = 0
    ACL_FLOAT16 = 1
    ACL_INT64 = 9


NUMPY_OF = {AclDataType.ACL_FLOAT: np.float32, AclDataType.ACL_FLOAT16: np.float16, AclDataType.ACL_INT64: np.int64}


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(f"ais_bench stand-in: {message}")


def make_ais_bench(io_dtype: type = np.float16) -> ModuleType:
    """A fresh `ais_bench` package whose infer.interface.InferSession runs stand-in .om files on the CPU."""
    sessions: list = []

    class InferSession:
        def __init__(self, device_id: int, model_path: str, acl_json_path: str | None = None, debug: bool = False,
                     loop: int = 1) -> None:
            _require(isinstance(device_id, int) and device_id >= 0, f"device_id must be an int >= 0, got {device_id!r}")
            _require(isinstance(model_path, str) and model_path.endswith(".om"), f"model_path {model_path!r}")
            self.device_id, self.model_path, self.freed, self.calls = device_id, model_path, False, []
            failed = acl_standin.runtime().init()  # DeviceManager::InitDevices: aclInit, logged, and on it goes
            if failed:
                print(f"[ERROR] acl init failed, ret {failed}")
            self._context = acl_standin.runtime().context("ais_bench", device_id)  # aclrtCreateContext: current
            self._session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
            self._input_type = np.float16 if self._session.get_inputs()[0].type == "tensor(float16)" else np.float32
            sessions.append(self)

        @staticmethod
        def _desc(value, dtype: AclDataType) -> SimpleNamespace:
            return SimpleNamespace(name=value.name, shape=list(value.shape), datatype=dtype, format=0)

        def _float_dtype(self) -> AclDataType:
            return AclDataType.ACL_FLOAT16 if io_dtype == np.float16 else AclDataType.ACL_FLOAT

        def get_inputs(self) -> list[SimpleNamespace]:
            return [self._desc(value, self._float_dtype()) for value in self._session.get_inputs()]

        def get_outputs(self) -> list[SimpleNamespace]:
            return [self._desc(value, AclDataType.ACL_INT64 if value.type == "tensor(int64)" else self._float_dtype())
                    for value in self._session.get_outputs()]

        def infer(self, feeds, mode: str = "static", custom_sizes=100000, out_array: bool = True) -> list[np.ndarray]:
            _require(not self.freed, "infer() after free_resource()")
            acl_standin.runtime().set_current(self._context)  # TensorBuffer::SetContext, before each copy
            _require(mode == "static", f"a static .om takes mode='static', got {mode!r}")
            _require(isinstance(feeds, list) and len(feeds) == 1, "feeds must be a list with one input")
            (feed,) = feeds
            expected = self.get_inputs()[0]
            _require(isinstance(feed, np.ndarray), f"feed type {type(feed)}")
            _require(feed.dtype == NUMPY_OF[expected.datatype], f"feed dtype {feed.dtype}, the .om takes "
                                                                f"{NUMPY_OF[expected.datatype]}")
            _require(list(feed.shape) == expected.shape, f"feed shape {list(feed.shape)}, the .om takes {expected.shape}")
            self.calls.append(feed.shape)
            outputs = self._session.run(None, {expected.name: feed.astype(self._input_type)})
            return [output if output.dtype == np.int64 else output.astype(io_dtype) for output in outputs]

        def free_resource(self) -> None:
            acl_standin.runtime().set_current(self._context)  # PyInferenceSession::Destroy: SetContext first
            self.freed = True

    package = ModuleType("ais_bench")
    package.infer = ModuleType("ais_bench.infer")
    package.infer.interface = ModuleType("ais_bench.infer.interface")
    package.infer.interface.InferSession = InferSession
    package.sessions = sessions
    return package


def install(monkeypatch: pytest.MonkeyPatch, io_dtype: type = np.float16) -> ModuleType:
    """Put a fresh stand-in at sys.modules['ais_bench'] (and its submodules) for the current test, with pyACL's `acl`
    (CANN ships both); returns it."""
    package = make_ais_bench(io_dtype)
    monkeypatch.setitem(sys.modules, "acl", acl_standin.make_pyacl())
    monkeypatch.setitem(sys.modules, "ais_bench", package)
    monkeypatch.setitem(sys.modules, "ais_bench.infer", package.infer)
    monkeypatch.setitem(sys.modules, "ais_bench.infer.interface", package.infer.interface)
    return package


def fake_atc(folder: Path) -> Path:
    """An `atc` in `folder` that writes <--output>.om as a copy of --model (the stand-in's .om is that ONNX)."""
    script = folder / "atc"
    script.write_text(f"""#!{sys.executable}
import shutil, sys
args = dict(arg[2:].split("=", 1) for arg in sys.argv[1:])
shutil.copyfile(args["model"], args["output"] + ".om")
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script

