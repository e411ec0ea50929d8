"""Dynamic batching: requests wait in a queue; a batch goes to the model when --max-batch of them wait or when the
oldest has waited --max-wait-ms. The model runs in one thread of its own, so the event loop keeps taking and decoding
requests while a batch runs, and they form the next batch."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from detect.serve.engine import Found, Prepared, Thresholds
from detect.serve.metrics import Metrics

LOGGER = logging.getLogger(__name__)
RunBatch = Callable[[Sequence[Prepared], Sequence[Thresholds]], list[Found]]


@dataclasses.dataclass
class _Waiting:
    image: Prepared
    thresholds: Thresholds
    answer: asyncio.Future
    since: float  # time.perf_counter() when it was queued


class Batcher:
    """Gathers prepared images into batches for `run` (ServedModel.run) and hands each its own answer."""

    def __init__(self, run: RunBatch, max_batch: int, max_wait_ms: float, metrics: Metrics) -> None:
        self.run, self.max_batch, self.max_wait = run, max_batch, max_wait_ms / 1000
        self.metrics = metrics
        self._queue: asyncio.Queue[_Waiting] | None = None
        self._task: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="detect-inference")

    def start(self) -> None:
        """Start gathering (inside the running event loop)."""
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._gather_forever())

    async def stop(self) -> None:
        """Stop gathering; the batch running now finishes first."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._thread.shutdown(wait=True)

    async def submit(self, image: Prepared, thresholds: Thresholds) -> tuple[Found, float]:
        """The image's detections and the seconds it waited in the queue."""
        waiting = _Waiting(image, thresholds, asyncio.get_running_loop().create_future(), time.perf_counter())
        self._queue.put_nowait(waiting)
        return await waiting.answer

    async def _gather_forever(self) -> None:
        while True:
            batch = [await self._queue.get()]
            deadline = batch[0].since + self.max_wait
            while len(batch) < self.max_batch:
                if not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                    continue
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), remaining))
                except asyncio.TimeoutError:
                    break
            await self._run_batch([waiting for waiting in batch if not waiting.answer.done()])  # gone: skipped

    async def _run_batch(self, batch: list[_Waiting]) -> None:
        if not batch:
            return
        started = time.perf_counter()
        waits = [started - waiting.since for waiting in batch]
        try:
            found = await asyncio.get_running_loop().run_in_executor(
                self._thread, self.run, [waiting.image for waiting in batch], [waiting.thresholds for waiting in batch])
        except Exception as error:  # one failed batch answers its requests with 500; the next runs
            LOGGER.exception("a batch of %d failed", len(batch))
            for waiting in batch:
                if not waiting.answer.done():
                    waiting.answer.set_exception(error)
            return
        self.metrics.record_batch(len(batch), time.perf_counter() - started, waits)
        for waiting, answer, wait in zip(batch, found, waits):
            if not waiting.answer.done():
                waiting.answer.set_result((answer, wait))
