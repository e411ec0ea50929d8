"""A stand-in for `python -m detect.serve` that scripts/bench_serve.py's test starts: `python serve_standin.py PORT
KEY`. GET /health answers 503 twice, then 200; POST /v1/detect asks for 'Authorization: Bearer KEY', answers a JPEG
with {"detections": []} and refuses any other body with 503; SIGTERM ends it with exit status 0."""

from __future__ import annotations

import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the real server
    health_calls = 0

    def answer(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        Handler.health_calls += 1
        self.answer(200 if Handler.health_calls > 2 else 503, {})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Authorization") != f"Bearer {sys.argv[2]}":
            self.answer(401, {"error": "no key"})
        elif self.path != "/v1/detect" or self.headers["Content-Type"] != "image/jpeg" or body[:2] != b"\xff\xd8":
            self.answer(503, {"error": "busy"})
        else:
            self.answer(200, {"detections": [], "image_size": [8, 8]})

    def log_message(self, *args) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    main()
