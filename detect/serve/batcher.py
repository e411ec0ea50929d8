"""Dynamic batching: requests wait in a queue; a batch is the oldest request and those after it of the same input
shape, and goes to the model when --max-batch of them wait or when the oldest has waited --max-wait-ms. Images of
other shapes wait for a batch of their own: an image's answer never depends on what else is in its batch (padded to
a larger shape, the model's borders see grey where predict's see zero padding: boxes moved by up to 14.7 px,
docs/serve.md). The model runs in one thread of its own, so the event loop keeps taking and decoding requests while
a batch runs, and they form the next batches."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from detect.inference.detector import Letterboxed
from detect.serve.engine import Found, Thresholds
from detect.serve.metrics import Metrics

RunBatch = Callable[[Sequence[Letterboxed], Sequence[Thresholds]], list[Found]]


@dataclasses.dataclass
class _Waiting:
    image: Letterboxed
    thresholds: Thresholds
    answer: asyncio.Future
    since: float  # time.perf_counter() when it was queued


class Batcher:
    """Gathers prepared images of one shape into batches for `run` (ServedModel.run) and hands each its own answer."""

    def __init__(self, run: RunBatch, max_batch: int, max_wait_ms: float, metrics: Metrics) -> None:
        self.run, self.max_batch, self.max_wait = run, max_batch, max_wait_ms / 1000
        self.metrics = metrics
        self._waiting: list[_Waiting] = []  # oldest first
        self._arrived = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="detect-inference")

    def start(self) -> None:
        """Start gathering (inside the running event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._gather_forever())

    async def stop(self) -> None:
        """Stop gathering; the batch running now finishes first."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._thread.shutdown(wait=True)

    async def submit(self, image: Letterboxed, thresholds: Thresholds) -> tuple[Found, float]:
        """The image's detections and the seconds it waited in the queue."""
        waiting = _Waiting(image, thresholds, asyncio.get_running_loop().create_future(), time.perf_counter())
        self._waiting.append(waiting)
        self._arrived.set()
        return await waiting.answer

    async def _gather_forever(self) -> None:
        while True:
            await self._run_batch(await self._next_batch())

    async def _next_batch(self) -> list[_Waiting]:
        """The oldest request and up to --max-batch - 1 more of its shape, once they are --max-batch or the oldest
        has waited --max-wait-ms; requests whose client left are dropped unanswered."""
        while True:
            self._waiting = [waiting for waiting in self._waiting if not waiting.answer.done()]
            if self._waiting:
                oldest = self._waiting[0]
                shape = oldest.image.pixels.shape
                batch = [waiting for waiting in self._waiting if waiting.image.pixels.shape == shape]
                remaining = oldest.since + self.max_wait - time.perf_counter()
                if len(batch) >= self.max_batch or remaining <= 0:
                    batch = batch[:self.max_batch]
                    taken = {id(waiting) for waiting in batch}
                    self._waiting = [waiting for waiting in self._waiting if id(waiting) not in taken]
                    return batch
            else:
                remaining = None
            self._arrived.clear()  # nothing arrives between the look above and this: no await between them
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def _run_batch(self, batch: list[_Waiting]) -> None:
        started = time.perf_counter()
        waits = [started - waiting.since for waiting in batch]
        try:
            found = await asyncio.get_running_loop().run_in_executor(
                self._thread, self.run, [waiting.image for waiting in batch], [waiting.thresholds for waiting in batch])
        except Exception as error:  # noqa: BLE001 (a failed batch: each request's 500 logs it; the next runs)
            for waiting in batch:
                if not waiting.answer.done():
                    waiting.answer.set_exception(error)
            return
        self.metrics.record_batch(len(batch), time.perf_counter() - started, waits)
        for waiting, answer, wait in zip(batch, found, waits):
            if not waiting.answer.done():
                waiting.answer.set_result((answer, wait))
