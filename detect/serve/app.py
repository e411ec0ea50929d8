"""The HTTP API (docs/serve.md): POST /v1/detect, GET /health, /v1/model, /metrics and / (the drop-an-image page),
on FastAPI. The model loads after the server starts listening, so /health answers 503 until it is loaded and warm.
A request takes one of --queue-size slots only once its body is in (clients.py reads it under a floor rate)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.datastructures import Headers
from starlette.formparsers import MultiPartException, MultiPartParser

from detect.serve.batcher import Batcher
from detect.serve.clients import BodyLimits, read_body, until_gone
from detect.serve.engine import Found, ServedModel, Thresholds
from detect.serve.guard import Guard
from detect.serve.metrics import CONTENT_TYPE, Metrics
from detect.serve.settings import ServeSettings
from detect.serve.uploads import Refused

LOGGER = logging.getLogger(__name__)
RETRY_AFTER_S = 1


class Service:
    """The model, its batcher, the decoding threads and the counters of one running service."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.metrics = Metrics(settings.max_batch)
        self.model: ServedModel | None = None  # set once loaded and warm
        self.batcher: Batcher | None = None
        self.failure: Exception | None = None
        self.on_failure: Callable[[], None] = lambda: None  # the server stops itself here
        self.decoders = ThreadPoolExecutor(settings.workers, thread_name_prefix="detect-decode")
        self.body_limits = BodyLimits(settings.max_bytes, settings.body_timeout_s, settings.body_min_rate)
        self.stopping = asyncio.Event()  # set on SIGTERM (server.py): bodies still arriving are cut

    async def load(self) -> None:
        """Load and warm the model in a thread (the server answers /health meanwhile), then start batching."""
        try:
            model = await asyncio.to_thread(ServedModel, self.settings)
            await asyncio.to_thread(model.warm_up)
        except Exception as error:  # noqa: BLE001 (a bad weights file ends the service with its line)
            self.failure = error
            self.on_failure()
            return
        self.metrics.set_max_batch(model.max_batch)
        self.batcher = Batcher(model.run, model.max_batch, self.settings.max_wait_ms, self.metrics)
        self.batcher.start()
        self.model = model
        LOGGER.info("ready: %s (%s, %s classes, at %s; batches of up to %d)", model.name, model.format,
                    len(model.names), model.detector.input_size, model.max_batch)

    async def close(self) -> None:
        if self.batcher is not None:
            await self.batcher.stop()
        self.decoders.shutdown(wait=False, cancel_futures=True)

    async def detect_response(self, request: Request) -> Response:
        """POST /v1/detect (anything unexpected goes up to the Guard, which answers 500)."""
        try:
            return JSONResponse(await self.detect(request))
        except Refused as refused:
            return refusal(refused)

    async def health_response(self) -> Response:
        """GET /health: 200 once the model is loaded and warm, 503 before (or when it failed to load)."""
        if self.model is None:
            state = "failed to load the model (the server's log says why)" if self.failure else "loading"
            return JSONResponse({"status": state}, 503, headers={"Retry-After": str(RETRY_AFTER_S)})
        return JSONResponse({"status": "ok"})

    async def model_response(self) -> Response:
        """GET /v1/model."""
        try:
            return JSONResponse(self.ready_model().describe())
        except Refused as refused:
            return refusal(refused)

    def ready_model(self) -> ServedModel:
        if self.model is None:
            raise Refused(503, "the model is loading", retry_after=RETRY_AFTER_S)
        return self.model

    async def detect(self, request: Request) -> dict:
        """The answer to POST /v1/detect; Refused for a request it will not answer, ClientGone when its client
        leaves first."""
        model = self.ready_model()
        thresholds = Thresholds.from_query(request.query_params, model.defaults, len(model.names))
        start = time.perf_counter()
        data = await self.read_image(request)
        if self.metrics.pending >= self.settings.queue_size:
            raise Refused(503, f"busy: {self.settings.queue_size} requests are being answered (--queue-size)",
                          retry_after=RETRY_AFTER_S)
        self.metrics.pending += 1
        try:
            return await until_gone(request.receive, self.detect_image(model, data, thresholds, start))
        finally:
            self.metrics.pending -= 1

    async def detect_image(self, model: ServedModel, data: bytes, thresholds: Thresholds, start: float) -> dict:
        """Decode and letterbox `data` in a decoding thread, then wait for its batch."""
        prepared = await asyncio.get_running_loop().run_in_executor(self.decoders, model.prepare, data)
        decoded = time.perf_counter()
        found, waited = await self.batcher.submit(prepared, thresholds)
        timing = {"decode": decoded - start, "queue": waited, "inference": found.inference_ms / 1000,
                  "total": time.perf_counter() - start}
        return answer(found, prepared.info.original, model, timing)

    async def read_image(self, request: Request) -> bytes:
        """The body (at most --max-bytes, at least --body-min-rate), or the 'image' field of a multipart form."""
        limits = self.body_limits
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limits.max_bytes:
            raise limits.too_large()
        self.metrics.reading += 1
        try:
            body = await read_body(request.receive, limits, self.stopping)
        finally:
            self.metrics.reading -= 1
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            return await form_image(request.headers, body)
        return body


async def form_image(headers: Headers, body: bytes) -> bytes:
    """The bytes of a multipart form's 'image' field; Refused (400) without one."""
    async def stream() -> AsyncIterator[bytes]:
        yield body

    try:
        form = await MultiPartParser(headers, stream(), max_files=1, max_fields=16).parse()
    except MultiPartException:
        raise Refused(400, "bad multipart form: send one file in an 'image' field (or the image's bytes as the "
                           "body)") from None
    try:
        field = form.get("image")
        if field is None:
            raise Refused(400, "the multipart form has no 'image' field")
        return field.encode() if isinstance(field, str) else await field.read()
    finally:
        await form.close()


def answer(found: Found, original: tuple[int, int], model: ServedModel, seconds: dict[str, float]) -> dict:
    """The JSON of one image's detections, boxes in its own pixels."""
    detections = [{"box": [round(side, 2) for side in row[:4]], "confidence": round(row[4], 5), "class": int(row[5]),
                   "name": model.names[int(row[5])]} for row in found.rows.tolist()]
    return {"detections": detections, "image_size": [original[1], original[0]], "model": model.name,
            "batch_size": found.batch_size, "windows": found.windows,
            "timing_ms": {name: round(1000 * value, 2) for name, value in seconds.items()}}


def refusal(refused: Refused) -> JSONResponse:
    headers = {"Retry-After": str(refused.retry_after)} if refused.retry_after is not None else {}
    if refused.close:
        headers["Connection"] = "close"
    return JSONResponse({"error": refused.reason}, refused.status, headers=headers)


def build_app(settings: ServeSettings) -> FastAPI:
    """The service's FastAPI app; its lifespan loads the model in the background and stops the batcher."""
    service = Service(settings)
    page = resources.files("detect.serve").joinpath("page.html").read_text(encoding="utf-8")

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        loading = asyncio.create_task(service.load())
        yield
        await loading
        await service.close()

    app = FastAPI(title="detect", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.add_middleware(Guard, key=settings.key, metrics=service.metrics, stopping=service.stopping)
    app.post("/v1/detect")(service.detect_response)
    app.get("/health")(service.health_response)
    app.get("/v1/model")(service.model_response)
    app.get("/metrics")(lambda: PlainTextResponse(service.metrics.text(), media_type=CONTENT_TYPE))
    app.get("/")(lambda: HTMLResponse(page))
    return app
