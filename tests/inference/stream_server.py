"""A small HTTP server on 127.0.0.1 for the source tests: MJPEG live streams (multipart/x-mixed-replace of frames made
with cv2.imencode, as IP cameras send them) and plain files (an image or video URL)."""

from __future__ import annotations

import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import cv2
import numpy as np

BOUNDARY = b"frame"
FRAME_SHAPE = (48, 64)  # (h, w)


def grey_frame(index: int) -> np.ndarray:
    """Frame `index` of a test stream: one grey level per frame, so a JPEG of it still tells which frame it is."""
    return np.full((*FRAME_SHAPE, 3), (index * 8) % 256, np.uint8)


def frame_number(image: np.ndarray) -> int:
    """Which grey_frame an image (or its JPEG) is, for indices below 32."""
    return round(float(image.mean()) / 8)


class StreamServer:
    """Serves `files` (path -> bytes) and `streams` (path -> the number of frames each connection gets, in turn; a
    connection after the last gets 404, so a stream that reconnects finds it gone). Frames are sent every
    `interval` seconds, numbered on across connections; the connection closes after its last frame. `loop`: images
    sent in turn, again and again (a looped clip), instead of the grey frames."""

    def __init__(self, interval: float = 0.01, loop: list[np.ndarray] | None = None,
                 stall: tuple[int, float] | None = None) -> None:
        self.loop = loop or []
        self.stall = stall  # (frames, seconds): each connection stops sending for that long after that many frames
        self.files: dict[str, bytes] = {}
        self.streams: dict[str, list[int]] = {}
        self.sent: dict[str, int] = {}  # frames sent on each stream path so far
        self.interval = interval
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = urllib.parse.urlsplit(self.path).path  # a query is the client's business
                if path in server.files:
                    body = server.files[path]
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                elif server.streams.get(path):
                    count, sent = server.streams[path].pop(0), server.sent.get(path, 0)
                    server.sent[path] = sent + count
                    self._send_frames(range(sent, sent + count))
                else:
                    self.send_error(404)

            def _send_frames(self, indices: range) -> None:
                self.send_response(200)
                self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={BOUNDARY.decode()}")
                self.end_headers()
                for index in indices:
                    image = server.loop[index % len(server.loop)] if server.loop else grey_frame(index)
                    jpeg = cv2.imencode(".jpg", image)[1].tobytes()
                    head = b"--%s\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % (BOUNDARY, len(jpeg))
                    self.wfile.write(head + jpeg + b"\r\n")
                    self.wfile.flush()
                    stalls = server.stall is not None and index - indices.start + 1 == server.stall[0]
                    time.sleep(server.stall[1] if stalls else server.interval)
                self.close_connection = True

            def log_message(self, *args: object) -> None:  # the tests read their own log, not the server's
                pass

        return Handler
