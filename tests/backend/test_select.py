"""select(): spec parsing, auto-selection and the errors for devices that are not there."""

import subprocess
import sys

import pytest
import torch

import detect.backend
from detect.backend import BackendUnavailable, parse_spec, select
from detect.backend import cuda as cuda_module
from detect.backend import npu as npu_module
from detect.backend.cpu import CpuBackend
from detect.errors import UserError
from tests.npu_standin import write_broken_torch_npu


@pytest.fixture
def no_accelerators(monkeypatch):
    monkeypatch.setattr(npu_module, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_cpu():
    backend = select("cpu")
    assert isinstance(backend, CpuBackend)
    assert backend.name == "cpu" and backend.device == torch.device("cpu")


def test_auto_falls_back_to_cpu(no_accelerators):
    assert select("auto").name == "cpu"
    assert select().name == "cpu"


def test_auto_here_is_cpu():
    # This machine has neither torch_npu nor a GPU.
    if torch.cuda.is_available() or npu_module.is_available():
        pytest.skip("an accelerator is present")
    assert select("auto").name == "cpu"


@pytest.mark.parametrize("spec, parsed", [("cpu", ("cpu", 0)), ("auto", ("auto", 0)), ("cuda", ("cuda", 0)),
                                          ("cuda:3", ("cuda", 3)), ("npu", ("npu", 0)), (" NPU:7 ", ("npu", 7))])
def test_parse_spec(spec, parsed):
    assert parse_spec(spec) == parsed


@pytest.mark.parametrize("spec", ["gpu", "", "cuda:", "cuda:x", "cpu:0", "auto:1", "npu:-1", "cuda:0:1", "mps"])
def test_bad_spec_is_one_line_user_error(spec):
    with pytest.raises(UserError) as caught:
        select(spec)
    assert "\n" not in str(caught.value) and f"'{spec}'" in str(caught.value)


def test_npu_without_torch_npu_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # makes `import torch_npu` raise ImportError
    with pytest.raises(BackendUnavailable) as caught:
        select("npu:0")
    message = str(caught.value)
    assert isinstance(caught.value, UserError) and "\n" not in message
    assert 'pip install "detect-trainer[npu]"' in message and "CANN" in message and "set_env.sh" in message
    assert "2.14" in message


@pytest.fixture
def broken_torch_npu(tmp_path, monkeypatch):
    """A torch_npu whose import raises a bare, multi-line Exception, as its CANN package check does
    (docs/torch-npu.md, "Device and imports")."""
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    monkeypatch.syspath_prepend(str(write_broken_torch_npu(tmp_path, "CANN check failed:\n  opp package missing")))


def test_npu_with_broken_cann_is_one_line(broken_torch_npu):
    with pytest.raises(BackendUnavailable) as caught:
        select("npu")
    message = str(caught.value)
    assert "\n" not in message and "Exception: CANN check failed: opp package missing" in message
    assert "set_env.sh" in message


def test_auto_skips_a_broken_torch_npu(broken_torch_npu, caplog):
    assert npu_module.is_available() is False
    assert "torch_npu is installed but unusable, so auto does not pick the NPU (Exception: CANN check" in caplog.text


def test_npu_not_available_for_auto_without_torch_npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    assert npu_module.is_available() is False


def test_cuda_unavailable_is_user_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="CUDA"):
        select("cuda")
    assert cuda_module.is_available() is False


def test_cuda_index_out_of_range(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(BackendUnavailable, match="cuda:5"):
        select("cuda:5")
    assert select("cuda:1").device == torch.device("cuda", 1)


def test_bad_amp_dtype():
    with pytest.raises(UserError, match="amp_dtype"):
        select("cpu", amp_dtype="fp8")


def test_cpu_rejects_fp16_amp():
    with pytest.raises(UserError, match="bfloat16"):
        select("cpu", amp_dtype="fp16")


def test_npu_options_ignored_off_npu():
    assert select("cpu", npu_jit_compile=True, npu_allow_hf32=False).name == "cpu"


def test_import_does_no_device_work():
    code = ("import sys, detect.backend, detect.backend.npu, detect.backend.cuda, detect.backend.cpu; "
            "assert 'torch_npu' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_cli_starts_without_torchvisions_package_or_matplotlib():
    # Both take seconds to import (docs/benchmarks.md); the NMS kernel comes from torchvision's library alone.
    code = ("import sys, torch, detect.val, detect.train, detect.predict; from detect.backend import select; "
            "boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]]); "
            "kept = select('cpu').nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5); "
            "assert kept.tolist() == [0, 2], kept; "
            "assert 'torchvision' not in sys.modules and 'matplotlib' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_spec_help_names_every_kind():
    for kind in ("auto", "cpu", "cuda", "npu"):
        assert kind in detect.backend.SPEC_HELP
