"""The Guard middleware in one process, for what a real server reaches only after seconds: a request still unanswered
when SIGTERM's grace ends (uvicorn cancels its task) gets 503, not a cancelled task's traceback."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")


def test_a_request_cancelled_at_shutdown_gets_503_and_one_cancelled_before_does_not():
    from detect.serve.guard import Guard
    from detect.serve.metrics import Metrics

    async def forever(_scope, _receive, _send) -> None:
        await asyncio.Event().wait()  # a batch that never ends

    async def cancelled(stopping: asyncio.Event) -> tuple[list[dict], Metrics]:
        metrics, sent = Metrics(1), []

        async def send(message: dict) -> None:
            sent.append(message)

        guard = Guard(forever, "", metrics, stopping)
        scope = {"type": "http", "method": "POST", "path": "/v1/detect", "headers": []}
        task = asyncio.ensure_future(guard(scope, None, send))
        await asyncio.sleep(0.01)
        task.cancel()  # what uvicorn does once --shutdown-timeout-s has passed
        await asyncio.gather(task, return_exceptions=True)
        return sent, metrics

    async def at_shutdown() -> tuple[list[dict], Metrics]:
        stopping = asyncio.Event()
        stopping.set()
        return await cancelled(stopping)

    sent, metrics = asyncio.run(at_shutdown())
    assert sent[0]["status"] == 503 and b"the service stopped before this request was answered" in sent[1]["body"]
    assert metrics.requests == {("/v1/detect", 503): 1}
    sent, metrics = asyncio.run(cancelled(asyncio.Event()))  # not stopping: the cancellation is not ours to answer
    assert sent == [] and metrics.requests == {}
