"""scripts/npu_check.sh runs end to end on the stand-ins (NPU_CHECK_SMALL=1): two stand-in NPUs placed on the CPU
(tests/npu_standin.py, every op checked as torch_npu would, warning as it does by default), ais_bench's InferSession
and a fake atc (tests/ais_bench_standin.py), so that on a card it runs as written. Its figures mean nothing here."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests import ais_bench_standin
from tests.training.helpers import tiny_dataset

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "npu_check.sh"

# Loaded by every interpreter the script starts: two stand-in NPUs backed by the CPU (ranks joined by gloo), each
# NPU backend's process then checking every op as torch_npu does by default (a warning per op without a kernel),
# and ais_bench's stand-in for the .om.
STANDIN_SITE = """
import sys
import torch
from tests import ais_bench_standin
from tests.npu_standin import enforce, make_torch_npu

sys.modules["torch_npu"] = make_torch_npu(device_count=2)
ais_bench = ais_bench_standin.make_ais_bench()
sys.modules.update({"ais_bench": ais_bench, "ais_bench.infer": ais_bench.infer,
                    "ais_bench.infer.interface": ais_bench.infer.interface})
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


def test_the_check_runs_end_to_end_on_the_standins(weights, tmp_path):
    data = tiny_dataset(tmp_path / "data")
    site, tools = tmp_path / "site", tmp_path / "bin"
    site.mkdir()
    tools.mkdir()
    (site / "sitecustomize.py").write_text(STANDIN_SITE)
    ais_bench_standin.fake_atc(tools)
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1",
               "PATH": f"{tools}:{os.environ['PATH']}", "NPU_CHECK_SMALL": "1", "NPU_CHECK_WEIGHTS": str(weights),
               "NPU_CHECK_DATA": str(data), "NPU_CHECK_IMAGES": str(data.parent / "images" / "train"),
               "NPU_CHECK_PORT": str(free_port())}
    out = tmp_path / "check"
    result = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=REPO, env=environ, capture_output=True, text=True,
                            timeout=900, check=False)
    printed = result.stdout + result.stderr
    assert result.returncode == 0, printed[-4000:]
    assert "NPUs: 2" in (out / "machine.txt").read_text()
    assert (out / "ops.txt").read_text().splitlines()[-1].startswith("verdict: all ")
    assert "| train fp16 |" in printed and "| train bf16 |" in printed
    assert "img/s" in (out / "train2.txt").read_text()  # two stand-in cards, one rank each
    assert printed.count("all ") >= 3  # mAP rows: NPU, CPU, the .om on the NPU
    assert "NMS per batch" in (out / "nms.txt").read_text()
    assert "train forward" in (out / "shapes.txt").read_text()
    assert list((out / "om").glob("*.om"))
    serve = (out / "serve.txt").read_text()
    assert "--max-batch 1" in serve and "--max-batch 8" in serve
    # The one op the stand-ins saw without an NPU kernel: the host side of the NMS timing (torchvision's NMS on the
    # CPU copy), which the stand-in's CPU tensors cannot tell from an NPU's.
    warned = {line.split("'")[1] for line in printed.splitlines() if "CAUTION: The operator '" in line}
    assert warned <= {"torchvision::nms"}, warned
