"""scripts/npu_check.sh runs end to end on the stand-ins (NPU_CHECK_SMALL=1): two stand-in NPUs placed on the CPU
(tests/npu_standin.py, every op checked as torch_npu would, warning as it does by default), ais_bench's InferSession,
pyACL and a fake atc (tests/ais_bench_standin.py, tests/acl_standin.py) and a CANN toolkit folder, so that on a card it
runs as written; its figures mean nothing here. Run as a user would where pieces are missing (a PATH without CANN's
tools, no torch_npu) it names each missing piece with its install command before step 1, skips what needs it, prints
a failed step's log tail, goes on, and ends with a table of every step."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ais_bench_standin
from tests.npu_standin import write_cann_toolkit
from tests.training.helpers import tiny_dataset

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "npu_check.sh"
GPU_SCRIPT = REPO / "scripts" / "gpu_check.sh"

# Loaded by every interpreter the script starts: two stand-in NPUs backed by the CPU (ranks joined by gloo), each
# NPU backend's process then checking every op as torch_npu does by default (a warning per op without a kernel),
# and ais_bench's stand-in for the .om.
STANDIN_SITE = """
import sys
from types import ModuleType
import torch
from tests import acl_standin, ais_bench_standin
from tests.npu_standin import enforce, make_torch_npu

sys.modules["torch_npu"] = make_torch_npu(device_count=2)
ais_bench = ais_bench_standin.make_ais_bench()
sys.modules.update({"ais_bench": ais_bench, "ais_bench.infer": ais_bench.infer,
                    "ais_bench.infer.interface": ais_bench.infer.interface,
                    "aclruntime": ModuleType("aclruntime"), "acl": acl_standin.make_pyacl()})
import detect.backend.npu as npu

original_init = npu.NpuBackend.__init__


def on_cpu(self, index=0, **options):
    dry_run = "torch_npu" in options  # doctor --ops's own NPU backend on the host
    original_init(self, index, **{"device": torch.device("cpu"), **options})
    if not dry_run and not getattr(sys, "npu_ops_checked", False):
        sys.npu_ops_checked = True
        enforce(sys.modules["torch_npu"], "warn")


npu.NpuBackend.__init__ = on_cpu
npu.NpuBackend.distributed_backend = "gloo"
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fake_python(folder: Path, fails_on: str | None = None) -> Path:
    """`python` in `folder`: this interpreter (its venv: torch, no torch_npu), exiting 3 with "boom" on stderr when its
    arguments hold `fails_on`."""
    folder.mkdir(parents=True, exist_ok=True)
    guard = f'case "$*" in *{fails_on}*) echo boom >&2; exit 3 ;; esac\n' if fails_on else ""
    (folder / "python").write_text(f'#!/bin/sh\n{guard}exec {sys.executable} "$@"\n')
    (folder / "python").chmod(stat.S_IRWXU)
    return folder


def run_as_a_user(script: Path, out: Path, bin_dir: Path, **env: str) -> tuple[int, str]:
    """The script run with a PATH of `bin_dir` and the system's folders only (no CANN tools, no npu-smi, no atc), no
    torch_npu, no CANN environment; (exit status, what it printed)."""
    environ = {"HOME": os.environ.get("HOME", "/root"), "PATH": f"{bin_dir}:/usr/bin:/bin",
               "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "NPU_CHECK_SMALL": "1", "GPU_CHECK_SMALL": "1", **env}
    result = subprocess.run(["bash", str(script), str(out)], cwd=REPO, env=environ, capture_output=True, text=True,
                            timeout=300, check=False)
    return result.returncode, result.stdout + result.stderr


def table(printed: str) -> dict[str, str]:
    """The final table: step -> status."""
    rows = [line.split(" | ") for line in printed.splitlines() if line.startswith("| ") and not line.startswith("| step")]
    return {row[0][2:]: row[1] for row in rows}


@pytest.mark.slow
def test_without_torch_npu_each_missing_piece_is_named_before_step_1(tmp_path):
    # Before: `python -c "import torch_npu"` ended the script in a ModuleNotFoundError traceback.
    code, printed = run_as_a_user(SCRIPT, tmp_path / "out", fake_python(tmp_path / "bin"))
    assert code == 1 and "Traceback" not in printed
    preflight = printed.split("\n2")[0]  # before the machine's date
    assert 'torch_npu and an NPU it sees (npu): pip install -e ".[npu]"' in preflight
    assert "CANN's environment (cann): source /usr/local/Ascend/ascend-toolkit/set_env.sh" in preflight
    assert "ais_bench and aclruntime (ais_bench): pip install the aclruntime and ais_bench wheels" in preflight
    assert "CANN's atc (atc): source CANN's set_env.sh" in preflight and "CANN's pyACL (import acl)" in preflight
    steps = table(printed)
    assert steps.pop("1. ops of yolov5n.yaml on the NPU") == "ok"  # doctor --ops needs no NPU
    assert len(steps) == 7 and all(status.startswith("skipped (missing: npu") for status in steps.values()), steps


def test_a_failed_step_shows_its_log_tail_and_the_check_goes_on(tmp_path):
    # Before: `set -euo pipefail` ended the check at the first failure, its error in a file nobody was shown.
    code, printed = run_as_a_user(SCRIPT, tmp_path / "out", fake_python(tmp_path / "bin", fails_on="--ops"))
    assert code == 1
    assert "   FAILED (exit 3); the end of " in printed and "   | boom" in printed
    steps = table(printed)
    assert steps["1. ops of yolov5n.yaml on the NPU"] == "FAILED (exit 3)"
    assert steps["8. serving on the NPU, --max-batch 1 then 8"].startswith("skipped (missing: npu")
    assert (tmp_path / "out" / "steps.md").read_text().count("\n| ") == 9  # header, rule, 8 steps


def test_the_gpu_check_names_what_is_missing_and_ends_with_its_table(tmp_path):
    code, printed = run_as_a_user(GPU_SCRIPT, tmp_path / "out", fake_python(tmp_path / "bin"),
                                  GPU_CHECK_WEIGHTS=str(tmp_path / "none.pt"))
    assert code == 1 and "Traceback" not in printed
    assert "a CUDA build of torch that sees a GPU (cuda): install torch's CUDA wheel" in printed
    assert f"the weights (weights): put yolov5n.pt at {tmp_path / 'none.pt'}" in printed
    steps = table(printed)
    assert list(steps) == ["1. training img/s, model only and end to end", "2. two epochs of the trainer on CUDA",
                           "3. mAP of " + str(tmp_path / "none.pt") + " on the GPU",
                           "4. serving on the GPU, --max-batch 1 then 8"]
    assert all(status.startswith("skipped (missing: cuda") for status in steps.values())


@pytest.mark.slow
def test_the_check_runs_end_to_end_on_the_standins(weights, tmp_path):
    data = tiny_dataset(tmp_path / "data")
    site, tools = tmp_path / "site", tmp_path / "bin"
    site.mkdir()
    tools.mkdir()
    (site / "sitecustomize.py").write_text(STANDIN_SITE)
    ais_bench_standin.fake_atc(tools)
    cann = write_cann_toolkit(tmp_path / "cann", "9.1.0")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1",
               "PATH": f"{tools}:{os.environ['PATH']}", "NPU_CHECK_SMALL": "1", "NPU_CHECK_WEIGHTS": str(weights),
               "NPU_CHECK_DATA": str(data), "NPU_CHECK_IMAGES": str(data.parent / "images" / "train"),
               "NPU_CHECK_PORT": str(free_port()), "ASCEND_HOME_PATH": str(cann),
               "ASCEND_OPP_PATH": str(cann / "opp")}
    out = tmp_path / "check"
    result = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=REPO, env=environ, capture_output=True, text=True,
                            timeout=900, check=False)
    printed = result.stdout + result.stderr
    assert result.returncode == 0, printed[-4000:]
    assert "preflight: every piece the steps need is here" in printed
    machine = (out / "machine.txt").read_text()
    assert "NPUs: 2" in machine and "chip Ascend910B3" in machine
    assert (out / "ops.txt").read_text().splitlines()[-1].startswith("verdict: all ")
    assert "| train fp16 |" in printed and "| train bf16 |" in printed
    assert "img/s" in (out / "train2.txt").read_text()  # two stand-in cards, one rank each
    assert printed.count("all ") >= 3  # mAP rows: NPU, CPU, the .om on the NPU
    nms = (out / "nms.txt").read_text()
    assert "NMS of one validation batch" in nms and "verdict: use --nms-device " in nms
    assert "train forward" in (out / "shapes.txt").read_text()
    assert list((out / "om").glob("*.om")) and "om: for Ascend910B3" in (out / "om.txt").read_text()
    serve = (out / "serve.txt").read_text()
    assert "--max-batch 1" in serve and "--max-batch 8" in serve
    assert set(table(printed).values()) == {"ok"} and len(table(printed)) == 8
    # The one op the stand-ins saw without an NPU kernel: the host side of the NMS comparison (torchvision's NMS on
    # the host's copy), which the stand-in's CPU tensors cannot tell from an NPU's.
    warned = {line.split("'")[1] for line in printed.splitlines() if "CAUTION: The operator '" in line}
    assert warned <= {"torchvision::nms"}, warned
