"""Run the service with uvicorn: listen, load the model in the background, and on SIGTERM stop taking requests, cut
the bodies still arriving, answer the requests whose body is in (for up to --shutdown-timeout-s, 503 after) and
return (the CLI then exits 0)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from detect.config import options_from_dict
from detect.serve.app import build_app
from detect.serve.settings import ServeSettings, is_loopback

LOGGER = logging.getLogger("detect.serve")


class _Server(uvicorn.Server):
    """uvicorn's server, which on SIGTERM first tells the service to cut the bodies still arriving: uvicorn itself
    waits for every request, and a body sent at 1 byte/s would hold the exit for the whole grace period."""

    def __init__(self, config: uvicorn.Config, stopping: asyncio.Event) -> None:
        super().__init__(config)
        self.stopping = stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping.set()
        await super().shutdown(sockets)


def serve(settings: ServeSettings | None = None, **options: Any) -> None:
    """Serve until SIGTERM or Ctrl-C: `serve(weights="yolov5n.onnx", port=8000)` (the CLI's flags as keyword
    arguments) or `serve(ServeSettings(...))`. A model that fails to load ends it with that error."""
    settings = settings or options_from_dict(ServeSettings, options, "detect.serve.serve")
    app = build_app(settings)
    service = app.state.service
    config = uvicorn.Config(app, host=settings.host, port=settings.port, access_log=settings.log_requests,
                            timeout_graceful_shutdown=settings.shutdown_timeout_s, log_config=None)
    server = _Server(config, service.stopping)
    service.on_failure = lambda: setattr(server, "should_exit", True)
    if not is_loopback(settings.host) and not settings.key:
        LOGGER.warning("--insecure: %s is served to anyone who can reach it, without a key", settings.host)
    LOGGER.info("detect.serve: %s on http://%s:%d (/health says when it is ready; %s)", settings.weights,
                settings.host, settings.port, "a key is asked" if settings.key else "no key asked")
    with _sigterm_ends_quietly():
        server.run()
    if service.failure is not None:
        raise service.failure


@contextlib.contextmanager
def _sigterm_ends_quietly() -> Iterator[None]:
    """uvicorn stops gracefully on SIGTERM, then raises the signal again with the handler it found: a handler that
    does nothing makes that a normal return (exit 0) instead of death by the signal (143)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda _number, _frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
