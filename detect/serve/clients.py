"""What a client's connection may do to the service, bounded: its body is read under a floor rate (a body that falls
behind is cut with 408, so a thousand slow uploads hold no request slot and no time of the model), a body still
arriving when the service stops is cut with 503, and a client that leaves before its answer is noticed, its work
dropped. Raw ASGI `receive`, so that every wait has its end."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from detect.serve.uploads import Refused

T = TypeVar("T")
Receive = Callable[[], Awaitable[dict[str, Any]]]


class ClientGone(Exception):
    """The client closed its connection before its answer (counted as status 499, nginx's code for it)."""


@dataclasses.dataclass(frozen=True)
class BodyLimits:
    """How large a body may be and how slowly it may come: `timeout_s` for it to begin, then one more second for each
    `min_rate` bytes received."""

    max_bytes: int
    timeout_s: float
    min_rate: int

    def too_large(self) -> Refused:
        return Refused(413, f"the body is over {self.max_bytes:,} bytes (--max-bytes)", close=True)


async def read_body(receive: Receive, limits: BodyLimits, stopping: asyncio.Event) -> bytes:
    """The request's whole body; Refused with 413 past `limits.max_bytes`, 408 for a body slower than its floor,
    503 once `stopping` is set; ClientGone when the client leaves."""
    loop = asyncio.get_running_loop()
    start, body = loop.time(), bytearray()
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        while True:
            deadline = start + limits.timeout_s + len(body) / limits.min_rate
            receiving = asyncio.ensure_future(receive())
            try:
                await asyncio.wait((receiving, stopped), timeout=max(0.0, deadline - loop.time()),
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                receiving.cancel()  # a no-op once it has its message; uvicorn's receive loses none when cancelled
            if not receiving.done() or receiving.cancelled():
                raise _cut(stopped.done(), len(body), loop.time() - start, limits)
            message = receiving.result()
            if message["type"] == "http.disconnect":
                raise ClientGone
            body += message.get("body", b"")
            if len(body) > limits.max_bytes:
                raise limits.too_large()
            if not message.get("more_body", False):
                return bytes(body)
    finally:
        stopped.cancel()


def _cut(stopping: bool, received: int, seconds: float, limits: BodyLimits) -> Refused:
    if stopping:
        return Refused(503, f"the service is stopping: the body was still arriving ({received:,} bytes received)",
                       close=True)
    return Refused(408, f"the body came too slowly: {received:,} bytes in {seconds:.1f} s; a body has "
                        f"{limits.timeout_s:g} s, and one more for every {limits.min_rate:,} bytes received "
                        "(--body-timeout-s, --body-min-rate)", close=True)


async def until_gone(receive: Receive, work: Awaitable[T]) -> T:
    """What `work` returns, or ClientGone (its work cancelled) as soon as the client closes the connection; call it
    once the body is read, when `receive` has nothing left to give but the disconnect."""
    answering = asyncio.ensure_future(work)
    leaving = asyncio.ensure_future(_disconnect(receive))
    try:
        await asyncio.wait((answering, leaving), return_when=asyncio.FIRST_COMPLETED)
    finally:
        leaving.cancel()
        if not answering.done():
            answering.cancel()
    if not answering.done() or answering.cancelled():
        raise ClientGone
    return answering.result()


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
