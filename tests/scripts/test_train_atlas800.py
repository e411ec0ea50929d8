"""scripts/train_atlas800.sh launches torchrun with 8 ranks per node, the HCCL settings and our flags."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_atlas800.sh"
FAKE_TORCHRUN = """#!/usr/bin/env bash
printf '%s\\n' "$@" > "$RECORD_ARGS"
env > "$RECORD_ENV"
"""


def launch(tmp_path: Path, *args: str, **env: str) -> tuple[list[str], dict[str, str]]:
    """Run the script with a fake torchrun on PATH; returns the arguments and environment it got."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "torchrun").write_text(FAKE_TORCHRUN)
    (bin_dir / "torchrun").chmod(0o755)
    environ = {name: value for name, value in os.environ.items() if not name.startswith(("HCCL_", "MAX_RESTARTS"))}
    environ.update(PATH=f"{bin_dir}:{os.environ['PATH']}", RECORD_ARGS=str(tmp_path / "args"),
                   RECORD_ENV=str(tmp_path / "env"), **env)
    subprocess.run(["bash", str(SCRIPT), *args], env=environ, check=True, timeout=30)
    recorded_env = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines() if "=" in line)
    return (tmp_path / "args").read_text().splitlines(), recorded_env


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_one_node_gets_eight_ranks_and_the_hccl_settings(tmp_path):
    args, env = launch(tmp_path, "--cfg", "yolov5s.yaml", "--batch-size", "512")
    assert (option(args, "--nnodes"), option(args, "--node_rank"), option(args, "--nproc_per_node")) == ("1", "0", "8")
    assert args[args.index("-m"):] == ["-m", "detect.train", "--device", "npu", "--dist-timeout", "1800",
                                       "--cpu-affinity", "auto", "--cfg", "yolov5s.yaml", "--batch-size", "512"]
    assert env["HCCL_CONNECT_TIMEOUT"] == "1200" and env["TASK_QUEUE_ENABLE"] == "2"
    assert option(args, "--max_restarts") == "0"


def test_second_node_of_two(tmp_path):
    args, _ = launch(tmp_path, "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--",
                     "--cfg", "yolov5s.yaml", MAX_RESTARTS="3", HCCL_CONNECT_TIMEOUT="300")
    assert (option(args, "--nnodes"), option(args, "--node_rank"), option(args, "--master_addr")) == \
        ("2", "1", "10.0.0.1")
    assert option(args, "--max_restarts") == "3"
    assert args[-2:] == ["--cfg", "yolov5s.yaml"]


def test_exported_settings_win(tmp_path):
    args, env = launch(tmp_path, "--cfg", "yolov5n.yaml", HCCL_CONNECT_TIMEOUT="300", TASK_QUEUE_ENABLE="1",
                       HCCL_EXEC_TIMEOUT="600")
    assert (env["HCCL_CONNECT_TIMEOUT"], env["TASK_QUEUE_ENABLE"]) == ("300", "1")
    assert option(args, "--dist-timeout") == env["HCCL_EXEC_TIMEOUT"] == "600"  # the two timeouts agree
