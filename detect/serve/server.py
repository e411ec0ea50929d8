"""Run the service with uvicorn: listen, load the model in the background, and on SIGTERM stop taking requests,
answer those in flight and return (the CLI then exits 0)."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from detect.config import options_from_dict
from detect.serve.app import build_app
from detect.serve.settings import ServeSettings, is_loopback

LOGGER = logging.getLogger("detect.serve")
# Requests in flight when SIGTERM comes get this long to be answered (a batch of 8 at 640 takes < 1 s on 2 cores).
GRACEFUL_SHUTDOWN_S = 30


def serve(settings: ServeSettings | None = None, **options: Any) -> None:
    """Serve until SIGTERM or Ctrl-C: `serve(weights="yolov5n.onnx", port=8000)` (the CLI's flags as keyword
    arguments) or `serve(ServeSettings(...))`. A model that fails to load ends it with that error."""
    settings = settings or options_from_dict(ServeSettings, options, "detect.serve.serve")
    app = build_app(settings)
    service = app.state.service
    config = uvicorn.Config(app, host=settings.host, port=settings.port, access_log=settings.log_requests,
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, log_config=None)
    server = uvicorn.Server(config)
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
