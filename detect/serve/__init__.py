"""`python -m detect.serve --weights W`: an HTTP detection service with dynamic batching over every format that val and
predict read (docs/serve.md). Needs the serve extra: pip install "detect-trainer[serve]".

    from detect.serve import serve
    serve(weights="yolov5n.onnx", max_batch=8)       # until SIGTERM or Ctrl-C
    app = build_app(ServeSettings(weights="yolov5n.onnx"))   # the FastAPI app, for your own ASGI server

settings.py holds the flags, clients.py reads a body under a floor rate and notices a client's leaving, uploads.py
checks and decodes an upload, engine.py runs the model (predict's Detector) on a batch, batcher.py gathers batches of
one shape, metrics.py writes /metrics, guard.py checks the key, counts the answers and answers errors in our words,
app.py holds the routes, server.py runs uvicorn.
The FastAPI parts load when first asked for, so `import detect.serve` works without the extra.
"""

from __future__ import annotations

from typing import Any

from detect.serve.settings import ServeSettings

__all__ = ["ServeSettings", "build_app", "serve"]


def __getattr__(name: str) -> Any:
    """build_app and serve, imported on first use (they need FastAPI and uvicorn)."""
    if name == "build_app":
        from detect.serve.app import build_app
        return build_app
    if name == "serve":
        from detect.serve.server import serve
        return serve
    raise AttributeError(f"module 'detect.serve' has no attribute {name!r}")
