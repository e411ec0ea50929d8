"""Run a CLI as a user would: `python -m <module> ...` in a subprocess of its own, with a time limit and a memory cap,
so that a hang or a runaway allocation fails the test instead of the CI machine."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GB = 2**30


def run_cli(module: str, *args: str, cwd: Path | None = None, timeout: float = 120, memory_gb: float = 8,
            merge_output: bool = False) -> subprocess.CompletedProcess:
    """`python -m module args` with this checkout first on the path, in `cwd` (default: the repo), on one thread, with
    at most `memory_gb` of data (issue 43's caps: 8 GB, 2 GB for a pixel bomb, 3 GB for a yaml bomb). The cap is
    RLIMIT_DATA, the heap and every private mapping (RLIMIT_AS would leave torch's CUDA build no room to map its
    libraries under a few GB): memory the process cannot have is a MemoryError, never a kernel kill. A hang past
    `timeout` seconds raises subprocess.TimeoutExpired; `merge_output` puts stderr into `.stdout`."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (int(memory_gb * GB), int(memory_gb * GB)))

    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", module, *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merge_output else subprocess.PIPE, text=True, timeout=timeout,
                          env=environ, cwd=cwd or REPO, preexec_fn=cap, check=False)
