"""The pixel limit: an image whose header claims more pixels than --max-pixels is refused by name, before a decoder
allocates its pixels (a 30000x30000 PNG of one colour is under 1 MB on disk and 2.7 GB decoded)."""

from __future__ import annotations

import contextlib
import struct
import warnings
from pathlib import Path
from typing import BinaryIO

from PIL import Image, UnidentifiedImageError

from detect.config import Bound

# PIL's own default (Image.MAX_IMAGE_PIXELS, 1024**3 // 4 // 3: a 9459x9459 image).
DEFAULT_MAX_PIXELS = 89_478_485
# cv2.imread refuses images over 2**30 pixels itself (OpenCV's CV_IO_MAX_IMAGE_PIXELS): a larger --max-pixels would
# let nothing more through.
LARGEST_MAX_PIXELS = 2**30
MAX_PIXELS = Bound(f"an integer in [1, {LARGEST_MAX_PIXELS}]", lambda value: 1 <= value <= LARGEST_MAX_PIXELS)
MAX_PIXELS_HELP = ("images whose header claims more pixels are skipped by name, never decoded (PIL's limit by "
                   "default; at most 2**30, cv2's own)")


class ImageTooLarge(OSError):
    """An image whose header claims more pixels than the limit (an OSError: callers skip it as an unreadable file)."""


ImageSource = Path | str | BinaryIO  # a file, or a seekable stream of its bytes (an upload: io.BytesIO)


def open_header(path: ImageSource) -> Image.Image:
    """The image as PIL opens it (header read, no pixel decoded) without PIL's own pixel limit, which check_pixels
    replaces; OSError when no format PIL knows reads it, ImageTooLarge when its format reader refuses the size itself
    (WebP, TIFF and MPO readers check it while they read the header)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            return Image.open(path)
        except Image.DecompressionBombError:
            pass  # over twice PIL's limit: Image.open refuses before it tells the size
        try:
            return _open_past_pil_limit(path)
        except Image.DecompressionBombError as error:
            raise ImageTooLarge(f"PIL refuses it: {error}") from None


def _open_past_pil_limit(path: ImageSource) -> Image.Image:
    """What Image.open does less its pixel check: the first of PIL's format readers that accepts the file's first
    bytes reads the header."""
    stream = None if isinstance(path, (str, Path)) else path
    if stream is None:
        with open(path, "rb") as handle:
            prefix = handle.read(16)
    else:
        stream.seek(0)
        prefix = stream.read(16)
    for format_id in Image.ID:
        factory, accept = Image.OPEN[format_id]
        if accept is not None and accept(prefix) is not True:
            continue
        if stream is not None:
            stream.seek(0)
        with contextlib.suppress(SyntaxError, IndexError, TypeError, struct.error):  # what Image.open skips too
            return factory(str(path) if stream is None else stream)
    raise UnidentifiedImageError(f"cannot identify image file {str(path)!r}")


def header_size(path: ImageSource) -> tuple[int, int]:
    """(width, height) as the image file's header states it (before EXIF rotation), no pixel decoded."""
    with open_header(path) as image:
        return image.size


def check_pixels(path: ImageSource, max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[int, int]:
    """The header's (width, height), or ImageTooLarge naming both sides when their product is over `max_pixels`;
    call it before decoding an image a user gave. A file whose format PIL does not know is refused too (an OSError):
    cv2 decodes a few more (PFM, Radiance HDR), whose size nothing here could check first."""
    try:
        width, height = header_size(path)
    except UnidentifiedImageError:
        raise OSError("cannot decode the image (no format whose header gives its size)") from None
    if width * height > max_pixels:
        raise ImageTooLarge(f"{width}x{height} is {width * height:,} pixels, more than the limit of {max_pixels:,} "
                            "(--max-pixels)")
    return width, height
