"""`mlflow server` for the tests: a SQLite backend and served artifacts on a free loopback port, in a process group of
its own (a test can freeze it whole with SIGSTOP, as an overloaded or stalled server behaves)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """The server's URI once it answers, and its process (the leader of its group)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
         "--artifacts-destination", str(folder / "served"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    uri, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    try:
        while True:
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, process.communicate()[1][-2000:]
                assert time.monotonic() < deadline, "the MLflow server did not start"
                time.sleep(0.5)
        yield uri, process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGCONT)  # a frozen server ends too
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
