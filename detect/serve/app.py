"""The HTTP API (docs/serve.md): POST /v1/detect, GET /health, /v1/model, /metrics and / (the drop-an-image page),
on FastAPI. The model loads after the server starts listening, so /health answers 503 until it is loaded and warm."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
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
from detect.serve.engine import Found, ServedModel, Thresholds
from detect.serve.metrics import CONTENT_TYPE, Metrics
from detect.serve.settings import ServeSettings
from detect.serve.uploads import Refused

LOGGER = logging.getLogger(__name__)
ROUTES = ("/", "/health", "/metrics", "/v1/detect", "/v1/model")  # metrics label the rest "other"
OPEN_ROUTES = ("/health",)  # answered without the API key (load balancers and probes have none)
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
        LOGGER.info("ready: %s (%s, %s classes, batches of up to %d)", model.name, model.format, len(model.names),
                    model.max_batch)

    async def close(self) -> None:
        if self.batcher is not None:
            await self.batcher.stop()
        self.decoders.shutdown(wait=False, cancel_futures=True)

    async def detect_response(self, request: Request) -> Response:
        """POST /v1/detect."""
        try:
            return JSONResponse(await self.detect(request))
        except Refused as refused:
            return refusal(refused)
        except Exception as error:  # noqa: BLE001 (a failed batch: its requests get 500, the service goes on)
            return JSONResponse({"error": f"inference failed: {type(error).__name__}: {error}"}, 500)

    async def health_response(self) -> Response:
        """GET /health: 200 once the model is loaded and warm, 503 before (or when it failed to load)."""
        if self.model is None:
            state = f"failed: {self.failure}" if self.failure else "loading"
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
        """The answer to POST /v1/detect; Refused for a request it will not answer."""
        model = self.ready_model()
        thresholds = Thresholds.from_query(request.query_params, model.defaults, len(model.names))
        if self.metrics.pending >= self.settings.queue_size:
            raise Refused(503, f"busy: {self.settings.queue_size} requests are being answered (--queue-size)",
                          retry_after=RETRY_AFTER_S)
        self.metrics.pending += 1
        try:
            start = time.perf_counter()
            data = await self.read_image(request)
            prepared = await asyncio.get_running_loop().run_in_executor(self.decoders, model.prepare, data)
            decoded = time.perf_counter()
            found, waited = await self.batcher.submit(prepared, thresholds)
            timing = {"decode": decoded - start, "queue": waited, "inference": found.inference_ms / 1000,
                      "total": time.perf_counter() - start}
            return answer(found, prepared.info.original, model, timing)
        finally:
            self.metrics.pending -= 1

    async def read_image(self, request: Request) -> bytes:
        """The body (at most --max-bytes), or the 'image' field of a multipart form."""
        limit = self.settings.max_bytes
        too_large = Refused(413, f"the body is over {limit:,} bytes (--max-bytes)")
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise too_large
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise too_large
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            return await form_image(request.headers, bytes(body))
        return bytes(body)


async def form_image(headers: Headers, body: bytes) -> bytes:
    """The bytes of a multipart form's 'image' field; Refused (400) without one."""
    async def stream() -> AsyncIterator[bytes]:
        yield body

    try:
        form = await MultiPartParser(headers, stream(), max_files=1, max_fields=16).parse()
    except MultiPartException as error:
        raise Refused(400, f"bad multipart form: {error.message}") from None
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
            "batch_size": found.batch_size, "timing_ms": {name: round(1000 * value, 2) for name, value in seconds.items()}}


def refusal(refused: Refused) -> JSONResponse:
    headers = {"Retry-After": str(refused.retry_after)} if refused.retry_after is not None else None
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
    app.middleware("http")(key_and_counts(service))
    app.post("/v1/detect")(service.detect_response)
    app.get("/health")(service.health_response)
    app.get("/v1/model")(service.model_response)
    app.get("/metrics")(lambda: PlainTextResponse(service.metrics.text(), media_type=CONTENT_TYPE))
    app.get("/")(lambda: HTMLResponse(page))
    return app


def key_and_counts(service: Service) -> Callable:
    """The middleware that asks every route but /health for the API key (when there is one) and counts answers."""
    key = service.settings.key.encode()

    async def middleware(request: Request, call_next: Callable) -> Response:
        path = request.url.path
        if key and path not in OPEN_ROUTES and not _has_key(request.headers.get("authorization", ""), key):
            response = JSONResponse({"error": "this service needs 'Authorization: Bearer <key>'"}, 401,
                                    headers={"WWW-Authenticate": "Bearer"})
        else:
            response = await call_next(request)
        service.metrics.record_request(path if path in ROUTES else "other", response.status_code)
        return response

    return middleware


def _has_key(authorization: str, key: bytes) -> bool:
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), key)
