"""`python -m detect.serve` end to end: one real server (the tiny 3-class model at 128, an API key, batches of up to 4
gathered for 300 ms, at most 3 requests at once) checked route by route, against predict's Detector (alone and in a
burst of mixed shapes), under a burst that overflows its queue, with hostile uploads and clients that leave, from the
page in Chromium with its key typed in, and stopped by SIGTERM with requests in flight; and a server whose model fails
unexpectedly, whose answers say so without its error's text."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import http.client
import json
import re
import shutil
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from detect.inference.detector import Detector, PredictSettings
from detect.inference.sample_images import SAMPLES_DIR
from tests.data.helpers import write_flat_png
from tests.serve.failing_model import SECRET
from tests.serve.helpers import Server, call, free_port, open_upload

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install -e '.[serve]'")

KEY = "test-key"
IMAGES = {path.name: path.read_bytes() for path in sorted(SAMPLES_DIR.glob("*.jpg"))}
LOW_CONF = 0.004  # the untrained model's scores are about 0.005: low enough for a few rows per image


@pytest.fixture(scope="module")
def server(weights, tmp_path_factory):
    running = Server(weights, tmp_path_factory.mktemp("serve") / "server.log", "--imgsz", "128", "--max-batch", "4",
                     "--max-wait-ms", "300", "--queue-size", "3", "--max-bytes", "2000000", key=KEY)
    yield running.start()
    running.stop()


def rows_of(reply_json: dict) -> np.ndarray:
    """(n, 6) [x1, y1, x2, y2, score, class] of an answer, sorted for comparison."""
    rows = np.array([[*found["box"], found["confidence"], found["class"]] for found in reply_json["detections"]])
    return rows[np.lexsort(rows.T[::-1])] if len(rows) else rows.reshape(0, 6)


def predicted(detector: Detector, image: bytes) -> np.ndarray:
    import cv2
    found = detector(cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR))[0]
    rows = found.rows.numpy().astype(np.float64)
    return rows[np.lexsort(rows.T[::-1])] if len(rows) else rows.reshape(0, 6)


def assert_same_rows(served: np.ndarray, expected: np.ndarray) -> None:
    assert served.shape == expected.shape
    np.testing.assert_allclose(served[:, :4], expected[:, :4], atol=0.02)  # answers round boxes to 0.01 px
    np.testing.assert_allclose(served[:, 4], expected[:, 4], atol=2e-5)
    assert (served[:, 5] == expected[:, 5]).all()


def multipart(field: str, data: bytes) -> tuple[bytes, dict[str, str]]:
    boundary = "detect-test-boundary"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="x.jpg"\r\n'
            f"Content-Type: image/jpeg\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def test_routes_keys_and_answers_equal_to_predict(server, weights):
    assert set(server.healths) <= {503, 200} and server.healths[-1] == 200
    for path in ("/v1/model", "/metrics"):
        assert server.get(path, headers={}).status == 401, path
        assert server.get(path, headers={"Authorization": "Bearer wrong"}).status == 401, path
    assert call(f"{server.url}/v1/detect", IMAGES["chelsea.jpg"], method="POST").status == 401
    assert call(f"{server.url}/health").status == 200  # probes have no key
    assert "<canvas" in call(f"{server.url}/").body.decode()  # the page too: it asks for the key itself
    model = server.get("/v1/model").json()
    assert (model["names"], model["imgsz"], model["format"], model["batch"]) == (
        ["cat", "dog", "bird"], [128, 128], "pytorch", {"max": 4, "static": None})

    detector = Detector(weights, "cpu", PredictSettings(imgsz=(128, 128), conf_threshold=LOW_CONF))
    for name, image in IMAGES.items():
        reply = server.post(image, f"?conf={LOW_CONF}")
        assert reply.status == 200, reply.body
        answer = reply.json()
        assert answer["model"] == weights.name and answer["batch_size"] == 1
        assert set(answer["timing_ms"]) == {"decode", "queue", "inference", "total"}
        assert len(answer["detections"]) > 0, name
        assert_same_rows(rows_of(answer), predicted(detector, image))
    body, headers = multipart("image", IMAGES["coffee.jpg"])
    by_form = server.post(body, f"?conf={LOW_CONF}", headers)
    assert by_form.status == 200 and rows_of(by_form.json()).tolist() == rows_of(
        server.post(IMAGES["coffee.jpg"], f"?conf={LOW_CONF}").json()).tolist()
    cat, width_height = server.post(IMAGES["chelsea.jpg"], f"?conf={LOW_CONF}&classes=1,2&max_det=2").json(), [451, 300]
    assert cat["image_size"] == width_height and len(cat["detections"]) <= 2
    assert {found["class"] for found in cat["detections"]} <= {1, 2}
    assert all(found["name"] == ["cat", "dog", "bird"][found["class"]] for found in cat["detections"])


def bmp_header(width: int, height: int) -> bytes:
    """A 54-byte BMP: its two headers (24-bit pixels), no pixel, its file size said to be 54."""
    return b"BM" + struct.pack("<IHHI", 54, 0, 0, 54) + struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 0,
                                                                      0, 0, 0)


def test_bad_input_gets_4xx_with_its_reason_and_the_server_stays_healthy(server, tmp_path):
    image = IMAGES["chelsea.jpg"]
    bomb = write_flat_png(tmp_path / "bomb.png", 30000, 30000).read_bytes()  # 0.9 MB, 2.7 GB decoded
    too_wide = "1100000x1 has a side over 1,048,576 pixels, the most OpenCV decodes"
    cases = {
        "garbage": (b"this is not an image" * 10, "", 400, "not an image"),
        "empty": (b"", "", 400, "empty body"),
        "truncated": (image[:len(image) // 2], "", 400, "truncated image"),
        "bomb": (bomb, "", 413, "30000x30000 is 900,000,000 pixels"),
        # Under --max-pixels, over OpenCV's side limit: cv2 raised its own error, answered 500 with its text.
        "bmp header": (bmp_header(1_100_000, 1), "", 413, too_wide),
        "ppm header": (b"P6\n1100000 1\n255\n\0", "", 413, too_wide),
        "bmp without pixels": (bmp_header(1000, 1), "", 400, "cannot decode the image"),
        "conf": (image, "?conf=2", 400, "bad query"),
        "classes": (image, "?classes=3", 400, "classes comma-separated indices below 3"),
        "form without image": (multipart("file", image)[0], "", 400, "no 'image' field"),
        "broken form": (b"--detect-test-boundary\r\nno headers", "", 400, "bad multipart form: send one file"),
    }
    for case, (data, query, status, reason) in cases.items():
        headers = multipart("file", image)[1] if "form" in case else {}
        reply = server.post(data, query, headers)
        assert (reply.status, reason in reply.json()["error"]) == (status, True), (case, reply.body)
        assert "OpenCV(" not in reply.json()["error"] and "error:" not in reply.json()["error"], case  # cv2's text
    # Over --max-bytes: refused from its Content-Length, before the body is sent (a client still sending it would see
    # the connection closed under it).
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.putrequest("POST", "/v1/detect")
    for name, value in {**server.auth(), "Content-Length": "2000001"}.items():
        connection.putheader(name, value)
    connection.endheaders()
    response = connection.getresponse()
    assert (response.status, json.loads(response.read())) == (413, {"error": "the body is over 2,000,000 bytes "
                                                                              "(--max-bytes)"})
    connection.close()
    assert server.get("/health").status == 200
    assert server.post(image).status == 200
    assert "Traceback" not in server.output()


def test_an_images_answer_does_not_depend_on_its_batch(server, weights):
    # At 128: astronaut.jpg is 128x128 in, chelsea.jpg and coffee.jpg 96x128. Padded into one 128x128 batch, the two
    # smaller ones got other boxes than predict's; now they share a batch of their own shape, and astronaut runs alone.
    names = ("astronaut.jpg", "chelsea.jpg", "coffee.jpg")
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        replies = list(pool.map(lambda name: server.post(IMAGES[name], f"?conf={LOW_CONF}"), names))
    assert [reply.status for reply in replies] == [200] * len(names), [reply.body for reply in replies]
    detector = Detector(weights, "cpu", PredictSettings(imgsz=(128, 128), conf_threshold=LOW_CONF))
    for name, reply in zip(names, replies):
        assert_same_rows(rows_of(reply.json()), predicted(detector, IMAGES[name]))
    assert replies[0].json()["batch_size"] == 1 and {reply.json()["batch_size"] for reply in replies[1:]} <= {1, 2}


def test_a_client_that_leaves_counts_as_499_not_500(server):
    def detect_total(status: int) -> int:
        found = re.search(rf'^detect_requests_total\{{route="/v1/detect",status="{status}"\}} (\d+)$',
                          server.get("/metrics").body.decode(), re.MULTILINE)
        return int(found.group(1)) if found else 0

    before = detect_total(499), detect_total(500)
    image = IMAGES["coffee.jpg"]
    open_upload(server, len(image), image[:1000]).close()  # leaves while it sends the body
    open_upload(server, len(image), image).close()  # leaves while its answer is made (300 ms of batching)
    deadline = time.monotonic() + 30
    while detect_total(499) < before[0] + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (detect_total(499), detect_total(500)) == (before[0] + 2, before[1])
    assert server.post(image).status == 200


def test_a_burst_is_batched_with_each_requests_thresholds_and_the_overflow_gets_503(server, weights):
    queries = [f"?conf={LOW_CONF}&max_det=1", f"?conf={LOW_CONF}&classes=2", "?conf=0.9", f"?conf={LOW_CONF}",
               f"?conf={LOW_CONF}&iou=0.1"]
    with concurrent.futures.ThreadPoolExecutor(len(queries)) as pool:
        replies = list(pool.map(lambda query: server.post(IMAGES["astronaut.jpg"], query), queries))
    answered = {query: reply.json() for query, reply in zip(queries, replies) if reply.status == 200}
    refused = [reply for reply in replies if reply.status != 200]
    # Normally 3 taken (--queue-size 3) and answered in one batch, 2 refused; a slow machine may start them further
    # apart than the 300 ms window, so only what must hold is asserted.
    assert max(answer["batch_size"] for answer in answered.values()) > 1
    assert refused and {(reply.status, reply.headers.get("retry-after")) for reply in refused} == {(503, "1")}
    assert "--queue-size" in refused[0].json()["error"]
    detector = Detector(weights, "cpu", PredictSettings(imgsz=(128, 128), conf_threshold=LOW_CONF))
    everything = predicted(detector, IMAGES["astronaut.jpg"])
    for query, answer in answered.items():
        rows = rows_of(answer)
        if "max_det=1" in query:
            assert len(rows) == 1
        elif "classes=2" in query:
            assert_same_rows(rows, everything[everything[:, 5] == 2])
        elif "conf=0.9" in query:
            assert len(rows) == 0
        elif "iou" not in query:
            assert_same_rows(rows, everything)  # the same answer inside a batch
    metrics = server.get("/metrics").body.decode()
    refusals = rf'^detect_requests_total\{{route="/v1/detect",status="503"\}} {len(refused)}$'
    assert re.search(refusals, metrics, re.MULTILINE), metrics
    assert re.search(r'^detect_requests_total\{route="/v1/detect",status="401"\} 1$', metrics, re.MULTILINE)
    single_batches = int(re.search(r'^detect_batch_size_bucket\{le="1"\} (\d+)$', metrics, re.MULTILINE).group(1))
    assert int(re.search(r"^detect_batch_size_count (\d+)$", metrics, re.MULTILINE).group(1)) > single_batches
    assert "# TYPE detect_queue_wait_seconds histogram" in metrics and "detect_inference_seconds_count" in metrics


def chromium_and_playwright():
    """Playwright's sync API and Debian's chromium binary, or a skip naming what is missing (Playwright's own browser
    download is not reachable here; .ci/run installs the chromium package)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is missing: pip install playwright")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("no chromium binary: apt-get install chromium")
    return sync_playwright, binary


DROP = """(data) => {
    const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
    const dropped = new DataTransfer();
    dropped.items.add(new File([bytes], "chelsea.jpg", {type: "image/jpeg"}));
    document.getElementById("drop").dispatchEvent(new DragEvent("drop", {dataTransfer: dropped}));
}"""


def test_the_page_asks_for_the_key_and_draws_the_boxes_of_a_dropped_image(server):
    sync_playwright, binary = chromium_and_playwright()
    image = base64.b64encode(IMAGES["chelsea.jpg"]).decode()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            assert page.goto(server.url + "/", wait_until="load").status == 200  # as a browser opens it: no key
            page.fill("#conf", str(LOW_CONF))
            page.evaluate(DROP, image)  # before the key is typed in
            page.wait_for_function("document.getElementById('status').textContent.startsWith('401')",
                                   timeout=30_000)
            asked = page.text_content("#status")
            page.fill("#key", KEY)
            page.evaluate(DROP, image)
            page.wait_for_selector("#detections li", timeout=30_000)
            drawn = page.evaluate("""() => {
                const canvas = document.getElementById("canvas");
                const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
                return {width: canvas.width, height: canvas.height, items: document.querySelectorAll("#detections li").length,
                        status: document.getElementById("status").textContent, alpha: pixels[3]};
            }""")
        finally:
            browser.close()
    assert asked == "401: this service asks for its API key: type it in the field above, then drop the image again"
    assert (drawn["width"], drawn["height"], drawn["alpha"]) == (451, 300, 255)  # the image, drawn at its size
    assert drawn["items"] > 0 and drawn["status"].startswith(f"{drawn['items']} detections in ")


def test_sigterm_answers_the_requests_in_flight_then_exits_0(server):
    replies = []
    threads = [threading.Thread(target=lambda: replies.append(server.post(IMAGES["coffee.jpg"]))) for _ in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while "detect_requests_pending 2" not in server.get("/metrics").body.decode() and time.monotonic() < deadline:
        time.sleep(0.02)  # until both are taken (they then wait out the 300 ms --max-wait-ms)
    assert server.terminate() == 0, server.output()
    for thread in threads:
        thread.join()
    assert [reply.status for reply in replies] == [200, 200]
    assert "Traceback" not in server.output()


def test_health_is_503_until_the_model_is_loaded(weights, monkeypatch):
    from detect.serve import ServeSettings, build_app

    app = build_app(ServeSettings(weights=str(weights)))
    reply = asyncio.run(app.state.service.health_response())
    assert (reply.status_code, reply.headers["Retry-After"], reply.body) == (503, "1", b'{"status":"loading"}')


def test_another_address_needs_a_key_or_insecure(weights, monkeypatch, capsys):
    from detect.serve.__main__ import main

    monkeypatch.delenv("DETECT_API_KEY", raising=False)
    assert main(["--weights", str(weights), "--host", "0.0.0.0"]) == 2
    assert capsys.readouterr().err == ("error: --host 0.0.0.0 would serve anyone who can reach it without a key: give "
                                       "--api-key (or $DETECT_API_KEY), or --insecure to serve it open\n")


def test_a_static_export_gets_padded_batches(weights, tmp_path):
    from detect.serve.engine import ServedModel, Thresholds
    from detect.serve.settings import ServeSettings
    from tests.exporters.helpers import run_export

    onnx = run_export(weights, tmp_path, "--include", "onnx", "--batch-size", "2")["onnx"]
    model = ServedModel(ServeSettings(weights=str(onnx)))
    assert (model.static_batch, model.max_batch, model.describe()["imgsz"]) == (2, 2, [96, 128])
    detector = Detector(onnx, "cpu", PredictSettings(conf_threshold=LOW_CONF))  # predict pads the batch too
    image = IMAGES["coffee.jpg"]
    (found,) = model.run([model.prepare(image)], [Thresholds(LOW_CONF, 0.45, 1000)])
    rows = found.rows.numpy().astype(np.float64)
    assert_same_rows(rows[np.lexsort(rows.T[::-1])], predicted(detector, image))


def test_a_model_that_fails_to_load_ends_the_service_with_its_line(tmp_path, monkeypatch, capsys):
    from detect.serve.__main__ import main

    monkeypatch.chdir(tmp_path)
    assert main(["--weights", "missing.pt", "--port", str(free_port())]) == 2
    assert capsys.readouterr().err.endswith("error: weights not found: missing.pt (give a path, or put the file in "
                                            f"{tmp_path / 'weights'})\n")


def test_a_body_without_content_length_is_cut_at_max_bytes(weights):
    from detect.serve.clients import BodyLimits, read_body
    from detect.serve.uploads import Refused

    def receive_of(chunks: list[bytes]):
        messages = [{"type": "http.request", "body": chunk, "more_body": index < len(chunks) - 1}
                    for index, chunk in enumerate(chunks)]

        async def receive() -> dict:
            return messages.pop(0)

        return receive

    limits = BodyLimits(max_bytes=2500, timeout_s=20, min_rate=500)
    assert asyncio.run(read_body(receive_of([b"x" * 1000] * 2), limits, asyncio.Event())) == b"x" * 2000
    with pytest.raises(Refused, match=r"^the body is over 2,500 bytes \(--max-bytes\)$") as refused:
        asyncio.run(read_body(receive_of([b"x" * 1000] * 3 + [b"never read"]), limits, asyncio.Event()))
    assert (refused.value.status, refused.value.close) == (413, True)


def test_an_unexpected_error_is_a_500_with_a_request_id_and_none_of_its_text(weights, tmp_path):
    launcher = (str(Path(__file__).with_name("failing_model.py")),)
    failing = Server(weights, tmp_path / "server.log", "--imgsz", "128", launcher=launcher)
    try:
        failing.start()
        reply = failing.post(IMAGES["coffee.jpg"])
        assert reply.status == 500
        request_id = reply.json()["request_id"]
        assert reply.json() == {"error": "internal error: the server's log has its details under request id "
                                         f"{request_id}", "request_id": request_id}
        assert reply.headers["x-request-id"] == request_id
        assert SECRET not in reply.body.decode() and "RuntimeError" not in reply.body.decode()
        assert failing.get("/health").status == 200  # the service goes on
        assert failing.terminate() == 0
    finally:
        failing.stop()
    log = failing.output()
    assert f"request {request_id} (POST /v1/detect) failed:\nTraceback" in log  # for whoever runs the server
    assert f"RuntimeError: the model broke: {SECRET}" in log
