"""Clients that send their body slowly, against the real `python -m detect.serve`: 64 uploads at 2 bytes a second
take no request slot (normal requests are answered meanwhile) and are cut with 408 once they fall behind the floor;
SIGTERM with a slow upload in flight cuts it, answers the request whose body is in, and exits 0 within 10 s. These
time how fast the server reacts: `serial` (tests/conftest.py)."""

from __future__ import annotations

import concurrent.futures
import re
import threading
import time

import pytest

from tests.serve.helpers import Server, open_upload, status_of
from tests.serve.test_serve import IMAGES

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")

ATTACKERS = 64
BODY = 1_000_000  # what each slow upload announces


def gauge(server: Server, name: str) -> int:
    return int(re.search(rf"^{name} (\d+)$", server.get("/metrics").body.decode(), re.MULTILINE).group(1))


def wait_for(condition, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def drip(connections: list, stop: threading.Event) -> None:
    """One more byte on each connection every half second, until `stop` (or the server closes it)."""
    while not stop.wait(0.5):
        for connection in connections:
            try:
                connection.send(b"x")
            except OSError:
                pass


def test_slow_uploads_take_no_slot_and_are_cut_with_408(weights, tmp_path):
    # --queue-size 3: before, 3 slow uploads were enough to refuse everyone else 503 (a slot was taken before the
    # body was read, and reading had no end). A body has 4 s here, then must average 1,000 bytes a second.
    server = Server(weights, tmp_path / "server.log", "--imgsz", "128", "--queue-size", "3", "--body-timeout-s", "4",
                    "--body-min-rate", "1000")
    stop = threading.Event()
    try:
        server.start()
        opened = time.monotonic()
        slow = [open_upload(server, BODY, b"x") for _ in range(ATTACKERS)]
        threading.Thread(target=drip, args=(slow, stop), daemon=True).start()
        wait_for(lambda: gauge(server, "detect_requests_reading") == ATTACKERS)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            normal = list(pool.map(server.post, [IMAGES["coffee.jpg"]] * 6))
        answered = time.monotonic() - opened
        assert [reply.status for reply in normal] == [200] * 6
        assert gauge(server, "detect_requests_reading") == ATTACKERS  # all still sending while those were answered
        statuses = [status_of(connection) for connection in slow]
        cut = time.monotonic() - opened
        assert statuses == [408] * ATTACKERS
        assert answered < 4 < cut < 4 + 3, (answered, cut)  # cut once behind the floor, soon after its 4 s
        assert gauge(server, "detect_requests_reading") == 0
        assert server.terminate() == 0
    finally:
        stop.set()
        server.stop()
    assert "Traceback" not in server.output()


def test_sigterm_cuts_a_slow_upload_answers_the_request_in_flight_and_exits_within_10_s(weights, tmp_path):
    # --max-wait-ms 1000: the normal request waits a second for its batch, in flight when SIGTERM comes.
    server = Server(weights, tmp_path / "server.log", "--imgsz", "128", "--max-wait-ms", "1000")
    replies = []
    try:
        server.start()
        slow = open_upload(server, BODY, b"x" * 10)
        normal = threading.Thread(target=lambda: replies.append(server.post(IMAGES["coffee.jpg"])))
        normal.start()
        wait_for(lambda: (gauge(server, "detect_requests_reading"), gauge(server, "detect_requests_pending")) == (1, 1))
        signalled = time.monotonic()
        code = server.terminate(timeout=10)
        stopped = time.monotonic() - signalled
        normal.join(timeout=10)
        assert (code, [reply.status for reply in replies], status_of(slow)) == (0, [200], 503)
        assert stopped < 10, stopped
    finally:
        server.stop()
    assert "Traceback" not in server.output() and "CancelledError" not in server.output()
