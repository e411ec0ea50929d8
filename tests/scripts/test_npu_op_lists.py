"""scripts/npu_op_lists.py regenerates detect/backend/npu_ops/*.json from a torch_npu wheel and an op-plugin clone:
here from a small wheel folder and a git repository made like the real ones."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "npu_op_lists.py"
CODEGEN = """backend: NPU
supported:
- _to_copy
- func: clone
  op_api: true
custom:
- func: npu_nms_v4(Tensor self, Tensor scores, Scalar max_output_size) -> (Tensor, Tensor)
symint:
- as_strided_
"""
OWN = "backend: NPU\nsupported:\n  - _to_copy\n"
LIBRARY = (b"\x00\x01junk\x00CAUTION: The operator 'aten::_fused_adam_' is not currently supported on the NPU backend and "
           b"will fall back to run on the CPU. This may have performance implications.\x00\x7f"
           b"Current operator _foreach_norm do not support internal format. \x00"
           b"CAUTION: The operator '\x00' is not currently supported \x00")
OP_PLUGIN = """all_version: [v2.1, v2.13, v2.14, v2.15]
official:
  - func: convolution(Tensor input) -> Tensor
    acl_op: all_version
    op_api: [v2.13, newest]
  - func: old_op(Tensor self) -> Tensor
    acl_op: [v2.1, v2.13]
  - func: listed(Tensor self) -> Tensor
    op_api: v2.1, v2.14
custom:
  - func: npu_nms_v4(Tensor self) -> (Tensor, Tensor)
    acl_op: all_version
"""


def fake_wheel(folder: Path) -> Path:
    files = {"torch_npu/version.py": "__version__ = '2.14.0'\ngit_version = '54e365d3'\n",
             "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml": CODEGEN,
             "torch_npu/csrc/aten/npu_native_functions.yaml": OWN}
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    (folder / "torch_npu/lib").mkdir()
    (folder / "torch_npu/lib/libtorch_npu.so").write_bytes(LIBRARY)
    return folder


def fake_op_plugin(folder: Path) -> str:
    (folder / "op_plugin/config").mkdir(parents=True)
    (folder / "op_plugin/config/op_plugin_functions.yaml").write_text(OP_PLUGIN)
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "snapshot"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False, capture_output=True, text=True, timeout=60)


def test_lists_come_from_the_wheel_and_the_op_plugin_entries_for_its_version(tmp_path):
    wheel = fake_wheel(tmp_path / "wheel")
    commit = fake_op_plugin(tmp_path / "op-plugin")
    result = run_script("--wheel", str(wheel), "--op-plugin", str(tmp_path / "op-plugin"), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "torch_npu 2.14.0: 4 registered, 1 host kernels, 1 refuse internal formats" in result.stdout
    torch_npu = json.loads((tmp_path / "out" / "torch_npu_2.14.0.json").read_text())
    assert torch_npu["registered"] == ["_to_copy", "as_strided_", "clone", "npu_nms_v4"]
    assert torch_npu["own"] == ["_to_copy"] and torch_npu["git_version"] == "54e365d3"
    assert list(torch_npu["host_kernels"]) == ["_fused_adam_"]
    assert torch_npu["refuse_internal_format"] == ["_foreach_norm"]
    assert "fallback message fragments not found" in result.stdout  # this library lacks the disabled-fallback text
    plugin = json.loads((tmp_path / "out" / "op_plugin_v2.14.json").read_text())
    assert (plugin["version"], plugin["commit"]) == ("v2.14", commit)
    assert plugin["acl_op"] == ["convolution", "npu_nms_v4"] and plugin["op_api"] == ["convolution", "listed"]


def test_a_whl_file_is_read_as_it_is(tmp_path):
    wheel = fake_wheel(tmp_path / "wheel")
    archive = tmp_path / "torch_npu-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(archive, "w") as handle:
        for path in wheel.rglob("*"):
            if path.is_file():
                handle.write(path, path.relative_to(wheel).as_posix())
    fake_op_plugin(tmp_path / "op-plugin")
    result = run_script("--wheel", str(archive), "--op-plugin", str(tmp_path / "op-plugin"), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert len(json.loads((tmp_path / "torch_npu_2.14.0.json").read_text())["sha256"]) == 64


def test_a_missing_source_is_one_line(tmp_path):
    result = run_script("--wheel", str(tmp_path / "none.whl"), "--op-plugin", str(tmp_path))
    assert result.returncode == 2 and result.stderr.strip() == f"error: {tmp_path / 'none.whl'} does not exist"
