"""Load benchmark of an HTTP detection service (`python -m detect.serve`): N requests of real images sent to
POST /v1/detect at concurrency C, reported as throughput (images/s) and p50/p90/p99 latency with the count of
failures; beside it the model alone in onnxruntime at batch B, the limit the served throughput is compared with.

    # a server already running at --url
    python scripts/bench_serve.py --images ../datasets/coco128/images/train2017 --requests 240 --concurrency 16
    # servers started in turn by the script (each on --url's port), and the model alone, in one run
    python scripts/bench_serve.py --images ../datasets/coco128/images/train2017 --requests 240 --concurrency 16 \\
        --serve "python -m detect.serve --weights yolov5n.onnx --max-batch 1" \\
        --serve "python -m detect.serve --weights yolov5n.onnx --max-batch 8" \\
        --onnx yolov5n.onnx --batch 8

A started server is waited for until GET /health answers 200, measured, then sent SIGTERM (its exit status is in
its row). Each load begins with --warmup requests that are not counted. Latency is from sending a request to
reading its whole answer (the percentiles are of the successes); throughput is the successes over the wall time of
the timed requests. A success is HTTP 200 with a JSON body holding "detections"; any other answer or a connection
error is a failure, counted by its status or error, and makes the exit status 1. `--api-key` (or DETECT_API_KEY) is
sent as 'Authorization: Bearer <key>'. The model alone (`--model-only`: nothing else): each image letterboxed to
the ONNX's input size (or --imgsz) outside the timer, float32 RGB in [0, 1], batches of B timed around session.run
only; batches above 1 need an ONNX whose batch is dynamic (`detect.export --dynamic`, or the model.onnx of
`--include triton`) or B. Client, servers and model share this machine's cores.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import http.client
import itertools
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import cv2
import numpy as np

from detect.data.datasets import to_network_layout
from detect.data.images.letterbox import letterbox

CONTENT_TYPES = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".bmp": "image/bmp",
                 ".webp": "image/webp"}
DETECT_PATH, HEALTH_PATH = "/v1/detect", "/health"


@dataclasses.dataclass(frozen=True)
class Upload:
    """One image file as a request body."""

    name: str
    body: bytes
    content_type: str


@dataclasses.dataclass
class LoadResult:
    """What one load gave: answers that succeeded, failures by kind, each success's latency, and the wall time."""

    requests: int
    ok: int = 0
    failures: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    latencies_ms: list[float] = dataclasses.field(default_factory=list)
    wall_s: float = 0.0

    @property
    def throughput(self) -> float:
        return self.ok / self.wall_s if self.wall_s > 0 else 0.0


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) of `values`, interpolated linearly between the two nearest ranks (numpy's
    default method)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def read_uploads(folder: Path) -> list[Upload]:
    """The image files of `folder` (sorted by name) as request bodies."""
    files = sorted(path for path in folder.iterdir() if path.suffix.lower() in CONTENT_TYPES and path.is_file())
    if not files:
        raise SystemExit(f"--images {folder}: no {', '.join(CONTENT_TYPES)} files in it")
    return [Upload(path.name, path.read_bytes(), CONTENT_TYPES[path.suffix.lower()]) for path in files]


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo, else lscpu) and the cores this process may use."""
    lines: list[str] = []
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    if not names:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            listing = subprocess.run(["lscpu"], check=False, capture_output=True, text=True, timeout=10).stdout
            names = [line.split(":", 1)[1].strip() for line in listing.splitlines() if line.startswith("Model name:")]
    return f"{names[0] if names else 'unknown CPU'} ({len(os.sched_getaffinity(0))} cores)"


class Client:
    """POSTs images to one server over one kept-alive connection per thread."""

    def __init__(self, url: str, api_key: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.base = parts.hostname, parts.port or 80, parts.path.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout, self.local = timeout, threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        if getattr(self.local, "connection", None) is None:
            self.local.connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self.local.connection

    def detect(self, upload: Upload) -> tuple[str | None, float]:
        """(None, latency ms) for a success, else (what failed, latency ms)."""
        start = time.perf_counter()
        try:
            connection = self._connection()
            connection.request("POST", self.base + DETECT_PATH, upload.body,
                               {**self.headers, "Content-Type": upload.content_type})
            response = connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as error:
            self.local.connection = None  # a fresh connection for the next request
            return type(error).__name__, (time.perf_counter() - start) * 1000
        latency = (time.perf_counter() - start) * 1000
        if response.status != 200:
            return f"HTTP {response.status}", latency
        try:
            answer = json.loads(body)
        except ValueError:
            return "not JSON", latency
        if not isinstance(answer, dict) or not isinstance(answer.get("detections"), list):
            return "no detections list", latency
        return None, latency


def run_load(client: Client, uploads: list[Upload], requests: int, concurrency: int) -> LoadResult:
    """`requests` POSTs of `uploads` in turn, `concurrency` in flight at a time."""
    result, lock, numbers = LoadResult(requests), threading.Lock(), itertools.count()

    def worker() -> None:
        while (index := next(numbers)) < requests:  # itertools.count is atomic under the GIL
            problem, latency = client.detect(uploads[index % len(uploads)])
            with lock:
                if problem is None:
                    result.ok += 1
                    result.latencies_ms.append(latency)
                else:
                    result.failures[problem] += 1

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()
    result.wall_s = time.perf_counter() - start
    return result


def health_status(url: str) -> int | None:
    """GET /health's status, or None when nothing answers at `url`."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=5)
    try:
        connection.request("GET", parts.path.rstrip("/") + HEALTH_PATH)
        return connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


@contextlib.contextmanager
def served(command: str, url: str, timeout: float) -> Iterator[subprocess.Popen]:
    """`command` started and healthy (GET /health 200) at `url`; SIGTERM and its exit awaited on leaving. Its output
    goes to a temporary log, shown when it fails to become healthy."""
    if health_status(url) is not None:
        raise SystemExit(f"something already answers at {url}: stop it, or give --url another port (and the same "
                         "--port to --serve's command)")
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(shlex.split(command), stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(process, url, timeout, log)
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_healthy(process: subprocess.Popen, url: str, timeout: float, log) -> None:
    deadline = time.monotonic() + timeout
    while health_status(url) != 200:
        ended = process.poll() is not None
        if ended or time.monotonic() > deadline:
            log.seek(0)
            tail = "\n".join(log.read().splitlines()[-15:])
            why = f"exited with status {process.returncode}" if ended else f"was not healthy after {timeout:.0f} s"
            raise SystemExit(f"the server {why}; its last lines:\n{tail}")
        time.sleep(0.2)


def model_alone(onnx_path: Path, uploads: list[Upload], batch: int, images: int, imgsz: int, threads: int = 0) -> float:
    """Images per second of the ONNX in onnxruntime (CPU, `threads` intra-op threads; 0: one per core) at `batch`,
    over at least `images` letterboxed images; only session.run is timed, after one batch of warm-up."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    graph_input = session.get_inputs()[0]
    fixed_batch, _, height, width = (side if isinstance(side, int) and side > 0 else None for side in graph_input.shape)
    if fixed_batch not in (None, batch):
        raise SystemExit(f"--onnx {onnx_path} takes batches of {fixed_batch} only, not --batch {batch}")
    shape = (height or imgsz, width or imgsz)
    turns = itertools.cycle(uploads)

    def next_batch() -> np.ndarray:
        pictures = [cv2.imdecode(np.frombuffer(next(turns).body, np.uint8), cv2.IMREAD_COLOR) for _ in range(batch)]
        layouts = [to_network_layout(letterbox(picture, shape, scale_up=True)[0]) for picture in pictures]
        return np.stack(layouts).astype(np.float32) / 255

    session.run(None, {graph_input.name: next_batch()})
    seconds, batches = 0.0, math.ceil(images / batch)
    for _ in range(batches):
        array = next_batch()
        start = time.perf_counter()
        session.run(None, {graph_input.name: array})
        seconds += time.perf_counter() - start
    return batches * batch / seconds


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", default="../datasets/coco128/images/train2017", help="folder of images to send")
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server (and where --serve's listen)")
    parser.add_argument("--requests", type=positive, default=240, help="timed requests per server")
    parser.add_argument("--concurrency", type=positive, default=16, help="requests in flight at a time")
    parser.add_argument("--warmup", type=int, default=None, help="untimed requests first (default: --concurrency)")
    parser.add_argument("--serve", action="append", metavar="COMMAND",
                        help="start this server command, measure it, stop it (again for another setup)")
    parser.add_argument("--health-timeout", type=float, default=300, help="seconds a started server may take to "
                                                                           "answer GET /health with 200")
    parser.add_argument("--timeout", type=float, default=120, help="seconds one request may take")
    parser.add_argument("--api-key", default=os.environ.get("DETECT_API_KEY", ""),
                        help="sent as 'Authorization: Bearer <key>' (default: $DETECT_API_KEY)")
    parser.add_argument("--onnx", type=Path, help="also time this ONNX alone in onnxruntime (the served limit)")
    parser.add_argument("--batch", type=positive, nargs="+", default=[8], help="--onnx's batch sizes")
    parser.add_argument("--imgsz", type=positive, default=640, help="--onnx's input side when its shape is dynamic")
    parser.add_argument("--threads", type=int, default=0, help="--onnx's intra-op threads (0: onnxruntime's own, "
                                                                 "one per core)")
    parser.add_argument("--model-only", action="store_true", help="time --onnx alone, send no request")
    args = parser.parse_args(argv)
    if args.model_only and not args.onnx:
        parser.error("--model-only times the model alone: give --onnx")
    if args.threads < 0:
        parser.error(f"--threads {args.threads}: a count of threads, or 0 for onnxruntime's own")
    if args.warmup is None:
        args.warmup = args.concurrency
    return args


def measure(command: str | None, uploads: list[Upload], args: argparse.Namespace) -> tuple[LoadResult, int | None]:
    """The load on the server at --url (started from `command` when given); with the started server's exit status."""
    client = Client(args.url, args.api_key, args.timeout)
    if command is None and health_status(args.url) != 200:
        raise SystemExit(f"no healthy server at {args.url} (GET {HEALTH_PATH}: {health_status(args.url)}); start "
                         "one, or give --serve COMMAND")
    with served(command, args.url, args.health_timeout) if command else contextlib.nullcontext() as process:
        if args.warmup:
            run_load(client, uploads, args.warmup, args.concurrency)
        result = run_load(client, uploads, args.requests, args.concurrency)
    return result, process.returncode if process is not None else None


def result_row(setup: str, result: LoadResult, exit_status: int | None) -> list[str]:
    """setup, ok/total, img/s, p50, p90, p99 (ms), failures and exit status."""
    latencies = [f"{percentile(result.latencies_ms, q):.0f}" if result.latencies_ms else "-" for q in (50, 90, 99)]
    failures = ", ".join(f"{kind} x{count}" for kind, count in result.failures.most_common()) or "-"
    status = "" if exit_status is None else f"; exit {exit_status}"
    return [setup, f"{result.ok}/{result.requests}", f"{result.throughput:.2f}", *latencies, failures + status]


def table(rows: list[list[str]]) -> str:
    header = ["setup", "ok", "img/s", "p50 ms", "p90 ms", "p99 ms", "failures"]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in [header, *rows])


def main(argv: list[str] | None = None) -> int:
    """The table; exit status 1 when a request failed."""
    args = parse_args(argv)
    uploads = read_uploads(Path(args.images))
    load = "" if args.model_only else (f"; {args.requests} requests a server at concurrency {args.concurrency} "
                                       f"(after {args.warmup} untimed)")
    print(f"bench_serve {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, CPU: {cpu_model()}; {len(uploads)} images "
          f"in {args.images}{load}", flush=True)
    rows, served_rates, failed = [], [], False
    for command in [] if args.model_only else args.serve or [None]:
        result, exit_status = measure(command, uploads, args)
        rows.append(result_row(command or args.url, result, exit_status))
        served_rates.append(result.throughput)
        failed |= result.ok < result.requests
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    alone = {}
    for batch in args.batch if args.onnx else []:
        alone[batch] = model_alone(args.onnx, uploads, batch, args.requests, args.imgsz, args.threads)
        threads = f", intra-op threads {args.threads}" if args.threads else ""
        rows.append([f"model alone: onnxruntime {args.onnx} batch {batch}{threads}", "-", f"{alone[batch]:.2f}", "-", "-",
                     "-", "-"])
    print(table(rows))
    for index, rate in enumerate(served_rates):
        ratios = [f"{rate / served_rates[0]:.2f}x the first server"] if index else []
        ratios += [f"{rate / limit:.2f}x the model alone at batch {batch}" for batch, limit in alone.items()]
        if ratios:
            print(f"server {index + 1}: " + ", ".join(ratios))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
