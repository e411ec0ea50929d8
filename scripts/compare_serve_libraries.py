"""Which library detect.serve is built on, by measurement (docs/serve.md, "Why FastAPI and our own batcher"): the same
model code (detect/serve/engine.py: decode, letterbox, one model call per batch, NMS) behind LitServe's batching and
behind `python -m detect.serve` (FastAPI, uvicorn and detect/serve/batcher.py), each sent the same multipart uploads by
C concurrent clients; and the model alone in onnxruntime at batch 1 and at --max-batch, the limit.

    python scripts/compare_serve_libraries.py --weights yolov5n.onnx --images ../datasets/coco128/images/train2017

Needs the serve extra and litserve (pip install litserve). Prints one line per server and one for the model alone.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

try:
    import litserve
except ImportError:
    litserve = None

BOUNDARY = "compare-serve-libraries"


def multipart(data: bytes) -> bytes:
    return (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="x.jpg"\r\n'
            f"Content-Type: image/jpeg\r\n\r\n").encode() + data + f"\r\n--{BOUNDARY}--\r\n".encode()


def post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, body, {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()
        return response.status


def load_test(url: str, bodies: list[bytes], requests: int, concurrency: int) -> tuple[float, int]:
    """(images per second, requests answered 200) for `requests` uploads sent by `concurrency` clients."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        statuses = list(pool.map(lambda index: post(url, bodies[index % len(bodies)]), range(requests)))
    return requests / (time.perf_counter() - start), statuses.count(200)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen) -> None:
    for _ in range(600):
        if process.poll() is not None:
            raise SystemExit(f"the server ended with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} never answered 200")


def measure_server(command: list[str], health: str, detect: str, bodies: list[bytes],
                   args: argparse.Namespace) -> tuple[float, int]:
    # a session of its own: LitServe's workers are child processes, ended with it by killpg
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        wait_healthy(health, process)
        load_test(detect, bodies, 2 * args.concurrency, args.concurrency)  # warm the connections and batch shapes
        return load_test(detect, bodies, args.requests, args.concurrency)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait()


class DetectAPI(litserve.LitAPI if litserve else object):
    """detect/serve/engine.py's ServedModel as a LitAPI (module level: LitServe pickles it into its worker)."""

    def __init__(self, weights: str, max_batch: int, max_wait_ms: float) -> None:
        super().__init__(max_batch_size=max_batch, batch_timeout=max_wait_ms / 1000)
        self.weights, self.max_batch = weights, max_batch

    def setup(self, device):
        from detect.serve.engine import ServedModel
        from detect.serve.settings import ServeSettings

        self.model = ServedModel(ServeSettings(weights=self.weights, device="cpu", max_batch=self.max_batch))
        self.model.warm_up()

    def decode_request(self, request):
        return self.model.prepare(request["image"].file.read())

    def batch(self, inputs):
        return inputs

    def predict(self, batch):
        return self.model.run(batch, [self.model.defaults] * len(batch))

    def unbatch(self, output):
        return output

    def encode_response(self, found):
        return {"detections": found.rows.tolist()}


def run_litserve(port: int, weights: str, max_batch: int, max_wait_ms: float) -> None:
    """The LitServe server, in its own process: LitServe's own batching of DetectAPI."""
    if litserve is None:
        raise SystemExit("the comparison needs litserve: pip install litserve")
    litserve.LitServer(DetectAPI(weights, max_batch, max_wait_ms), accelerator="cpu", workers_per_device=1).run(
        host="127.0.0.1", port=port, num_api_servers=1, generate_client_file=False, log_level="warning")


def model_alone(weights: str, batch: int, imgsz: int, repeats: int = 5) -> float:
    """Images per second of the ONNX alone in onnxruntime at `batch` (best of `repeats`, after one warm run)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(weights, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    images = np.random.default_rng(0).random((batch, 3, imgsz, imgsz), dtype=np.float32)
    session.run(None, {name: images})
    best = min(_timed(lambda: session.run(None, {name: images})) for _ in range(repeats))
    return batch / best


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", required=True, help="a dynamic ONNX (export --include onnx --dynamic)")
    parser.add_argument("--images", default=str(Path(__file__).resolve().parents[1] / "detect/inference/samples"))
    parser.add_argument("--requests", type=int, default=240)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--only", choices=("detect", "litserve", "model"), help="run one of the three")
    parser.add_argument("--run-litserve", type=int, help=argparse.SUPPRESS)  # the LitServe process's port
    args = parser.parse_args()
    if args.run_litserve:
        run_litserve(args.run_litserve, args.weights, args.max_batch, args.max_wait_ms)
        return
    bodies = [multipart(path.read_bytes()) for path in sorted(Path(args.images).glob("*.jpg"))[:64]]
    print(f"{args.requests} requests, {args.concurrency} clients, {len(bodies)} images, --max-batch {args.max_batch}, "
          f"--max-wait-ms {args.max_wait_ms}, {os.cpu_count()} CPUs")
    if args.only in (None, "detect"):
        port = free_port()
        command = [sys.executable, "-m", "detect.serve", "--weights", args.weights, "--port", str(port), "--device",
                   "cpu", "--imgsz", str(args.imgsz), "--max-batch", str(args.max_batch), "--max-wait-ms",
                   str(args.max_wait_ms)]
        url = f"http://127.0.0.1:{port}"
        rate, answered = measure_server(command, url + "/health", url + "/v1/detect", bodies, args)
        print(f"detect.serve (FastAPI + uvicorn + our batcher): {rate:.2f} images/s, {answered}/{args.requests} 200")
    if args.only in (None, "litserve"):
        port = free_port()
        command = [sys.executable, __file__, "--weights", args.weights, "--max-batch", str(args.max_batch),
                   "--max-wait-ms", str(args.max_wait_ms), "--run-litserve", str(port)]
        url = f"http://127.0.0.1:{port}"
        rate, answered = measure_server(command, url + "/health", url + "/predict", bodies, args)
        print(f"LitServe (its batching, the same model code): {rate:.2f} images/s, {answered}/{args.requests} 200")
    if args.only in (None, "model"):
        print(f"the model alone in onnxruntime: {model_alone(args.weights, 1, args.imgsz):.2f} images/s at batch 1, "
              f"{model_alone(args.weights, args.max_batch, args.imgsz):.2f} at batch {args.max_batch}")


if __name__ == "__main__":
    main()
