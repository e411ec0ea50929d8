"""scripts/train_atlas800.sh launches torchrun with 8 ranks per node, the HCCL settings and our flags; HCCL_IF_IP is the
address of the interface that routes to the master (`ip route get`), not the first of `hostname -I`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_atlas800.sh"
FAKE_TORCHRUN = """#!/usr/bin/env bash
printf '%s\\n' "$@" > "$RECORD_ARGS"
env > "$RECORD_ENV"
"""


# `ip route get 10.0.0.1` on a node with a docker bridge: the route to the master leaves through eth1.
FAKE_IP = """#!/usr/bin/env bash
printf '%s\\n' "$*" > "$RECORD_IP"
echo "$4 via 192.168.1.1 dev eth1 src 192.168.1.23 uid 0"
echo "    cache"
"""
FAKE_HOSTNAME = "#!/usr/bin/env bash\necho '172.17.0.1 192.168.1.23 '\n"  # the bridge's address first


def launch(tmp_path: Path, *args: str, tools: tuple[str, ...] = ("ip", "hostname"),
           **env: str) -> tuple[list[str], dict[str, str]]:
    """Run the script with a fake torchrun (and `tools` faked) on PATH; returns the arguments and environment it
    got."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fakes = {"torchrun": FAKE_TORCHRUN, "ip": FAKE_IP, "hostname": FAKE_HOSTNAME}
    for name in ("torchrun", *tools):
        (bin_dir / name).write_text(fakes[name])
        (bin_dir / name).chmod(0o755)
    if "ip" not in tools:  # a PATH of bin_dir alone (the system's folders hold iproute2's ip): what the fakes need
        for tool in ("bash", "env"):
            if not (bin_dir / tool).exists():
                (bin_dir / tool).symlink_to(shutil.which(tool))
    environ = {name: value for name, value in os.environ.items() if not name.startswith(("HCCL_", "MAX_RESTARTS"))}
    environ.update(PATH=f"{bin_dir}:/usr/bin:/bin" if "ip" in tools else str(bin_dir), RECORD_ARGS=str(tmp_path / "args"),
                   RECORD_ENV=str(tmp_path / "env"), RECORD_IP=str(tmp_path / "ip"), **env)
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


def test_hccl_binds_the_address_that_routes_to_the_master(tmp_path):
    _, env = launch(tmp_path, "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--",
                    "--cfg", "yolov5s.yaml")
    assert (tmp_path / "ip").read_text().strip() == "route get 10.0.0.1"
    assert env["HCCL_IF_IP"] == "192.168.1.23"  # not 172.17.0.1, the first of hostname -I


def test_without_a_route_hccl_if_ip_is_left_to_hccl_and_said(tmp_path, capfd):
    _, env = launch(tmp_path, "--cfg", "yolov5s.yaml", tools=("hostname",))  # no `ip` on PATH
    assert "HCCL_IF_IP" not in env
    assert "HCCL_IF_IP is not set: no route to 127.0.0.1 found (iproute2's ip)" in capfd.readouterr().err


def test_an_exported_hccl_if_ip_wins(tmp_path):
    _, env = launch(tmp_path, "--cfg", "yolov5s.yaml", HCCL_IF_IP="10.9.9.9")
    assert env["HCCL_IF_IP"] == "10.9.9.9" and not (tmp_path / "ip").exists()
