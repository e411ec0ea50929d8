"""The options of `python -m detect.serve` and `detect.serve.serve`: the model, where to listen, the batching, and the
limits on what a request may send."""

from __future__ import annotations

import dataclasses
import ipaddress
import os

from detect import backend as backends
from detect.config import IMAGE_SIZE, POSITIVE, UNIT, Bound, option
from detect.data.images.pixels import DEFAULT_MAX_PIXELS, MAX_PIXELS
from detect.errors import UserError
from detect.inference.detector import PredictSettings
from detect.inference.model import IMGSZ_DEFAULT_HELP, check_imgsz_flag
from detect.inference.slicing import SliceSettings, SlicingFlags

API_KEY_VARIABLE = "DETECT_API_KEY"
PORT = Bound("an integer in [0, 65535] (0: a free port)", lambda value: 0 <= value <= 65535)
MILLISECONDS = Bound("a number of milliseconds in [0, 10000]", lambda value: 0 <= value <= 10_000)
SECONDS = Bound("a number of seconds in (0, 3600]", lambda value: 0 < value <= 3600)
# An upload is held in memory while it is decoded: 20 MB holds any photo a camera writes.
DEFAULT_MAX_BYTES = 20_000_000
# The floor on a body's rate is Apache httpd's (mod_reqtimeout's default `RequestReadTimeout body=20,MinRate=500`):
# 20 s for the body to begin, and one more second for every 500 bytes received.
BODY_TIMEOUT_S = 20.0
BODY_MIN_RATE = 500


@dataclasses.dataclass(frozen=True)
class ServeSettings(SlicingFlags):
    """What the service loads, where it listens, how it batches and what it refuses (NMS defaults: predict's)."""

    weights: str = option(description="what val and predict read: ours or a yolov5 .pt, .torchscript, .onnx (static "
                                      "or dynamic), an OpenVINO .xml or its folder, an .om (on an NPU)")
    device: str = option("auto", backends.SPEC_HELP)
    nms_device: str = option("device", backends.NMS_DEVICE_HELP, choices=backends.NMS_DEVICES)
    imgsz: tuple[int, ...] | None = option(None, "inference size: one side, or height width (a static export: its "
                                           "own); " + IMGSZ_DEFAULT_HELP, bound=IMAGE_SIZE)
    host: str = option("127.0.0.1", "address to listen on; another than loopback needs --api-key or --insecure")
    port: int = option(8000, "port to listen on", bound=PORT)
    max_batch: int = option(8, "largest batch the model runs (a static export: its own batch)", bound=POSITIVE)
    max_wait_ms: float = option(5.0, "a batch goes to the model once its oldest request has waited this long",
                                bound=MILLISECONDS)
    conf_thres: float = option(PredictSettings.conf_threshold, "default confidence threshold (query: conf)",
                               bound=UNIT)
    iou_thres: float = option(PredictSettings.iou_threshold, "default NMS IoU threshold (query: iou)", bound=UNIT)
    max_det: int = option(PredictSettings.max_det, "default and largest detections per image (query: max_det; "
                                                   "--slice: per window)",
                          bound=POSITIVE)
    max_bytes: int = option(DEFAULT_MAX_BYTES, "largest request body in bytes (413 above it)", bound=POSITIVE)
    max_pixels: int = option(DEFAULT_MAX_PIXELS, "an upload whose header claims more pixels is refused (413) before "
                                                 "any pixel is decoded (PIL's limit by default; at most 2**30, cv2's)",
                             bound=MAX_PIXELS)
    workers: int = option(2, "threads that decode and letterbox images", bound=POSITIVE)
    queue_size: int = option(64, "requests taken at once (decoding, waiting or in a batch; a request is taken once "
                                 "its body is in); 503 with Retry-After above it", bound=POSITIVE)
    body_timeout_s: float = option(BODY_TIMEOUT_S, "seconds a request body has to arrive, plus one for every "
                                   "--body-min-rate bytes of it received (408 for a slower body)", bound=SECONDS)
    body_min_rate: int = option(BODY_MIN_RATE, "bytes a second a body must average past its first --body-timeout-s",
                                bound=POSITIVE)
    shutdown_timeout_s: float = option(8.0, "on SIGTERM, seconds the requests whose body is in get to be answered "
                                       "(503 after); bodies still arriving are cut at once", bound=SECONDS)
    api_key: str = option("", f"every route but /health and the page asks for 'Authorization: Bearer <key>' "
                              f"(default: ${API_KEY_VARIABLE})")
    insecure: bool = option(False, "listen on an address other than loopback without an API key")
    log_requests: bool = option(False, "log one line per request (uvicorn's access log)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_imgsz_flag(self.imgsz)
        if not is_loopback(self.host) and not self.key and not self.insecure:
            raise UserError(f"--host {self.host} would serve anyone who can reach it without a key: give --api-key "
                            f"(or ${API_KEY_VARIABLE}), or --insecure to serve it open")

    @property
    def key(self) -> str:
        """The API key: --api-key, else $DETECT_API_KEY; empty: no key asked."""
        return self.api_key or os.environ.get(API_KEY_VARIABLE, "")

    def predict_settings(self) -> PredictSettings:
        """The Detector's settings: the size, the default thresholds and the slicing."""
        return PredictSettings(imgsz=self.imgsz and (self.imgsz[0], self.imgsz[-1]), conf_threshold=self.conf_thres,
                               iou_threshold=self.iou_thres, max_det=self.max_det,
                               slicing=SliceSettings.asked(self, self.max_batch), nms_device=self.nms_device)


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine only (localhost, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
