"""Run a CLI as a user would: `python -m <module> ...` in a subprocess, with a time limit and a memory cap, so a hang
or a runaway allocation fails the test instead of the CI machine."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MEMORY_CAP = 8 << 30  # bytes of address space (issue 43's cap; torch imports under it)


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run_cli(module: str, *args: str, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m module args` from the repo's code, its stdout and stderr together in `.stdout`; a hang past
    `timeout` seconds raises subprocess.TimeoutExpired (the process is killed)."""
    environ = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, env=environ, cwd=cwd or REPO, preexec_fn=_capped, check=False)
