"""The ASGI middleware around every route: it asks for the API key (every route but the page and /health), counts
each answer by route and status in /metrics, and answers what went wrong in our words. Anything unexpected is a 500
with a request id, logged here with its traceback under that id; the answer never holds the exception's text. A
client that left before its answer counts as 499 (nginx's code), and a request still unanswered when SIGTERM's grace
ends gets 503 instead of a cancelled task's traceback."""

from __future__ import annotations

import asyncio
import hmac
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from detect.serve.clients import ClientGone
from detect.serve.metrics import Metrics

LOGGER = logging.getLogger(__name__)
ROUTES = ("/", "/health", "/metrics", "/v1/detect", "/v1/model")  # metrics label the rest "other"
# Answered without the key: load balancers and probes have none, and the page holds nothing secret (it asks for the
# key and sends it with each image).
OPEN_ROUTES = ("/", "/health")
GONE = 499  # nginx's "client closed request"
App = Callable[[dict, Callable, Callable], Awaitable[None]]


class Guard:
    """The key check, the counts and the error answers around `app` (the FastAPI routes)."""

    def __init__(self, app: App, key: str, metrics: Metrics, stopping: asyncio.Event) -> None:
        self.app, self.key, self.metrics, self.stopping = app, key.encode(), metrics, stopping

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: int | None = None

        async def send_counted(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if self.key and scope["path"] not in OPEN_ROUTES and not self._has_key(scope):
                await JSONResponse({"error": "this service needs 'Authorization: Bearer <key>'"}, 401,
                                   headers={"WWW-Authenticate": "Bearer"})(scope, receive, send_counted)
            else:
                await self.app(scope, receive, send_counted)
        except ClientGone:
            pass
        except asyncio.CancelledError:
            if not self.stopping.is_set() or status is not None:
                raise
            await JSONResponse({"error": "the service stopped before this request was answered"}, 503,
                               headers={"Connection": "close"})(scope, receive, send_counted)
        except Exception as error:  # noqa: BLE001 (the answer is ours; the log has the traceback)
            await self._failed(error, scope, receive, send_counted, started=status is not None)
        path = scope["path"]
        self.metrics.record_request(path if path in ROUTES else "other", GONE if status is None else status)

    def _has_key(self, scope: dict) -> bool:
        scheme, _, given = Headers(scope=scope).get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.key)

    @staticmethod
    async def _failed(error: Exception, scope: dict, receive: Callable, send: Callable, started: bool) -> None:
        """Log `error` with its traceback under a new request id, and answer 500 with that id alone."""
        request_id = uuid.uuid4().hex[:16]
        LOGGER.error("request %s (%s %s) failed:", request_id, scope["method"], scope["path"], exc_info=error)
        if not started:  # else uvicorn closes the connection of the answer it began
            await JSONResponse({"error": f"internal error: the server's log has its details under request id "
                                         f"{request_id}", "request_id": request_id}, 500,
                               headers={"X-Request-ID": request_id})(scope, receive, send)
