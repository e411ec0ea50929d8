"""An uploaded image's bytes checked and decoded: empty, not an image, cut short, over --max-pixels or OpenCV's side
limit (read from the header, before any pixel is decoded), or undecodable is refused with its reason."""

from __future__ import annotations

import io

import cv2
import numpy as np

from detect.data.images.pixels import ImageTooLarge, check_pixels

FORMATS = "JPEG, PNG, BMP or WebP"
# OpenCV's decoders refuse a side over 2**20 pixels with an exception (CV_IO_MAX_IMAGE_WIDTH and _HEIGHT, checked in
# imgcodecs/src/loadsave.cpp, validateInputImageSize): a 54-byte BMP header claiming 1,100,000 x 1 passes
# --max-pixels and would reach it.
MAX_SIDE = 2**20


class Refused(Exception):
    """A request the service will not answer, with the HTTP status and the one-line reason it gets back; `close`
    ends the connection after it (refused before its body was read: the rest is not waited for)."""

    def __init__(self, status: int, reason: str, retry_after: int | None = None, close: bool = False) -> None:
        super().__init__(reason)
        self.status, self.reason, self.retry_after, self.close = status, reason, retry_after, close


def cut_short(data: bytes) -> bool:
    """Whether a JPEG, PNG, BMP or WebP file ends before its format says it does (a decoder would fill the rest in)."""
    if data.startswith(b"\xff\xd8"):
        return not data.rstrip(b"\x00").endswith(b"\xff\xd9")  # the end-of-image marker (some cameras pad zeros)
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return b"IEND" not in data[-12:]
    if data.startswith(b"BM") and len(data) >= 6:
        return len(data) < int.from_bytes(data[2:6], "little")  # BITMAPFILEHEADER's file size
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return len(data) < 8 + int.from_bytes(data[4:8], "little")  # the RIFF chunk's size
    return False


def decode_upload(data: bytes, max_pixels: int) -> np.ndarray:
    """(h, w, 3) uint8 BGR of an uploaded image (EXIF rotation applied, as cv2.imread and predict do); Refused with
    400 for an empty, unknown, truncated or undecodable file, 413 for one whose header claims more than `max_pixels`
    or a side over MAX_SIDE."""
    if not data:
        raise Refused(400, f"empty body: send the image's bytes ({FORMATS}) or a multipart form with an 'image' field")
    try:
        width, height = check_pixels(io.BytesIO(data), max_pixels)
    except ImageTooLarge as error:
        raise Refused(413, f"image too large: {error}") from None
    except Exception:  # noqa: BLE001 (PIL raises many types for bad headers)
        raise Refused(400, f"not an image: no {FORMATS} header") from None
    if max(width, height) > MAX_SIDE:
        raise Refused(413, f"image too large: {width}x{height} has a side over {MAX_SIDE:,} pixels, the most OpenCV "
                           "decodes")
    if cut_short(data):
        raise Refused(400, f"truncated image: the file ends before its format's end ({len(data):,} bytes received)")
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    except cv2.error:  # its text names OpenCV's source lines, not the upload's fault
        image = None
    if image is None:
        raise Refused(400, "cannot decode the image (a damaged file, or a format this OpenCV cannot read)")
    return image
