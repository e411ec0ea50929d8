"""A real `python -m detect.serve` on 127.0.0.1 at a free port, run as a user runs it under a memory cap, and small
HTTP clients for it: urllib's, and raw sockets for the clients that misbehave (slow bodies, leaving early)."""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

START_TIMEOUT_S = 90  # importing torch and loading the model take seconds on 2 busy cores
# The server's memory cap (RLIMIT_DATA, as tests/user_run.py caps a CLI): the tiny model served at 128 needs under
# 1 GB, yolov5n at 640 with batches of 4 under 2.
MEMORY_GB = 4


@dataclasses.dataclass
class Reply:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def call(url: str, data: bytes | None = None, headers: dict[str, str] | None = None,
         method: str | None = None) -> Reply:
    """One request; an HTTP error status is a Reply too."""
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return Reply(response.status, {k.lower(): v for k, v in response.headers.items()}, response.read())
    except urllib.error.HTTPError as error:
        return Reply(error.code, {k.lower(): v for k, v in error.headers.items()}, error.read())


class Server:
    """`python -m detect.serve` with `flags` on a free port, at most MEMORY_GB of memory; `start()` returns once /health
    says 200. `launcher`: what runs instead of `-m detect.serve` (a script that changes the service first)."""

    def __init__(self, weights: Path, log: Path, *flags: str, key: str = "",
                 launcher: tuple[str, ...] = ("-m", "detect.serve")) -> None:
        self.port, self.key, self.log = free_port(), key, log
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, *launcher, "--weights", str(weights), "--port", str(self.port), *flags]
        env = {**os.environ, "DETECT_API_KEY": key}
        with open(log, "wb") as output:  # a file, not a pipe: a pipe nobody reads would block the server once full
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
        limit = MEMORY_GB * 2**30  # set from here (no preexec_fn, unsafe in a threaded test): from its first import on
        resource.prlimit(self.process.pid, resource.RLIMIT_DATA, (limit, limit))
        self.healths: list[int] = []  # /health's answers while it started

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def start(self) -> Server:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server ended ({self.process.returncode}):\n{self.output()}")
            try:
                self.healths.append(call(self.url + "/health").status)
            except OSError:
                time.sleep(0.2)  # not listening yet
                continue
            if self.healths[-1] == 200:
                return self
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"/health never said 200 in {START_TIMEOUT_S} s:\n{self.output()}")

    def post(self, data: bytes, query: str = "", headers: dict[str, str] | None = None) -> Reply:
        return call(f"{self.url}/v1/detect{query}", data, {**self.auth(), **(headers or {})}, "POST")

    def get(self, path: str, headers: dict[str, str] | None = None) -> Reply:
        return call(self.url + path, headers=self.auth() if headers is None else headers)

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM, then its exit code (subprocess.TimeoutExpired after `timeout` seconds)."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def open_upload(server: Server, length: int, first: bytes = b"", path: str = "/v1/detect") -> socket.socket:
    """A connection that has sent a POST's headers, announcing `length` bytes of body, and `first` of them; the test
    sends the rest (or not) itself."""
    connection = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    headers = "".join(f"{name}: {value}\r\n" for name, value in server.auth().items())
    connection.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
                       f"{headers}Content-Length: {length}\r\n\r\n".encode() + first)
    return connection


def status_of(connection: socket.socket) -> int | None:
    """The status of the answer on `connection`, or None when the server closed it without one."""
    try:
        head = connection.recv(65536)
    except OSError:  # reset: the server closed it while the client still sent
        return None
    return int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else None
