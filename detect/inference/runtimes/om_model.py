"""An Ascend offline model (.om, from `detect.export --include om`) run by ais_bench's InferSession on an NPU.

ais_bench and its aclruntime come with Huawei's ait tools (gitee.com/ascend/ait, components/benchmark), not PyPI;
they need CANN. The calls are those of ais_bench.infer.interface.InferSession: InferSession(device_id, model_path),
get_inputs() / get_outputs() (descriptions with name, shape, datatype: aclDataType codes), infer(feeds,
mode="static") -> list of numpy arrays, free_resource(). Tested against a stand-in with those signatures only
(tests/ais_bench_standin.py); this path has not run on a chip here.

ais_bench's aclruntime makes an ACL context of its own current on the calling thread (when the session is made and
before every copy of a tensor), the thread where torch_npu runs NMS next, and nothing documents that torch_npu's ops
still run then; torch_npu's own set_device would not help (it returns early for the thread's device). So every call
into the session is wrapped: the thread's current context is read before it and made current again after it, with
pyACL (`import acl`, CANN's python/site-packages) (docs/torch-npu.md, "First hour").
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from detect.backend import Backend
from detect.errors import UserError
from detect.inference.exported import ExportedModel, ExportInfo, existing_file

LOGGER = logging.getLogger(__name__)
METADATA_SUFFIX = ".om.json"  # written by exporters/om.py beside the .om
ACL_DTYPES = {0: np.float32, 1: np.float16}  # aclDataType: ACL_FLOAT, ACL_FLOAT16 (CANN's acl_base.h)
INSTALL = ("ais_bench and aclruntime (Huawei's ait benchmark wheels, gitee.com/ascend/ait, components/benchmark), "
           "with CANN's set_env.sh sourced")


def _infer_session():
    """ais_bench's InferSession class, or one line naming what to install."""
    try:
        from ais_bench.infer.interface import InferSession
    except ImportError as error:
        raise UserError(f"running an .om needs {INSTALL} ({error})") from None
    return InferSession


def _pyacl():
    """pyACL's `acl` module, or one line naming where it comes from."""
    try:
        import acl
    except ImportError as error:
        raise UserError(f"running an .om needs pyACL (`import acl`, in CANN's python/site-packages, on PYTHONPATH once "
                        f"CANN's set_env.sh is sourced), which keeps the NPU backend's ACL context current around "
                        f"ais_bench's calls ({error})") from None
    return acl


@contextlib.contextmanager
def context_kept(acl) -> Iterator[None]:
    """The ACL context current on this thread before the block is current again after it (none: nothing to keep)."""
    context, status = acl.rt.get_context()
    try:
        yield
    finally:
        if status == 0 and context is not None:
            acl.rt.set_context(context)


def _metadata(path: Path) -> tuple[ExportInfo, str | None]:
    """The .om's export metadata and the chip it was compiled for, from <stem>.om.json."""
    sidecar = path.with_suffix(METADATA_SUFFIX)
    if not sidecar.is_file():
        raise UserError(f"{path}: its metadata {sidecar.name} is missing (python -m detect.export --include om "
                        f"writes it beside the .om)")
    try:
        values = json.loads(sidecar.read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"{sidecar}: not readable JSON ({error})") from None
    return ExportInfo.from_values(values, path), values.get("soc_version")


def _check_chip(path: Path, compiled_for: str | None, backend: Backend) -> None:
    """An .om runs on the chip ATC compiled it for: one named in its .om.json that is not this NPU's is refused
    (docs/torch-npu.md, "First hour")."""
    chip = backend.device_name()
    if compiled_for and compiled_for != chip:
        raise UserError(f"{path} was compiled for {compiled_for} (its {METADATA_SUFFIX}) but {backend.device} is "
                        f"{chip}: export it again with --soc-version {chip}")


class OmInference(ExportedModel):
    """An .om on the backend's Ascend device; names, stride and NMS-in-graph from <stem>.om.json. Inputs are cast to
    the dtype the .om declares (fp16 where ATC made it so) and outputs come back as float32."""

    format = "om"  # its name in inference/model.py's FORMATS

    def __init__(self, path: str | Path, backend: Backend) -> None:
        self.path = existing_file(path, "OM")
        device_id = backend.offline_model_device()
        info, compiled_for = _metadata(self.path)
        _check_chip(self.path, compiled_for, backend)
        session_class, self._acl = _infer_session(), _pyacl()
        with context_kept(self._acl):
            self.session = session_class(device_id, str(self.path))
        graph_input = self.session.get_inputs()[0]
        dtype = ACL_DTYPES.get(int(graph_input.datatype))
        if dtype is None:
            raise UserError(f"{self.path}: input data type {graph_input.datatype} is not float32 or float16")
        if any(side <= 0 for side in graph_input.shape):
            raise UserError(f"{self.path}: a dynamic input {list(graph_input.shape)}; export the .om static")
        self._describe(info, list(graph_input.shape), dtype)
        LOGGER.info("%s runs in ais_bench on Ascend device %d", self.path, device_id)

    def _run(self, array: np.ndarray) -> np.ndarray:
        with context_kept(self._acl):
            return self.session.infer([array], mode="static")[0]
