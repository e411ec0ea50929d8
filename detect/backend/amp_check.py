"""The two checks before training keeps AMP on by default. Speed, where the backend times it (the CPU): the model's
training step under autocast against fp32 at the run's batch and size, its verdict cached. Agreement (yolov5's
check_amp without a download): the model's predictions on a fixed image with and without autocast must agree, or an
fp16 problem would only show as a flat mAP days later."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import hashlib
import json
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import torch
from torch import nn

from detect.atomic_file import write_text
from detect.backend import cpu
from detect.backend.base import Backend

LOGGER = logging.getLogger(__name__)

CONFIDENT = 0.25  # predictions compared box by box: as confident as predict's default threshold
BOX_TOLERANCE = 0.02  # their boxes' largest difference, as a fraction of the image side
SCORE_TOLERANCE = 0.05  # every prediction's confidence (objectness x best class score)


@dataclasses.dataclass(frozen=True)
class AmpCheck:
    """How far autocast's predictions are from fp32's, and whether that is within the tolerances."""

    box_error: float  # fraction of the image side, over the confident predictions (0 when there are none)
    score_error: float
    nonfinite: int  # predictions finite in fp32 but not under autocast

    @property
    def agrees(self) -> bool:
        return self.nonfinite == 0 and self.box_error <= BOX_TOLERANCE and self.score_error <= SCORE_TOLERANCE

    def __str__(self) -> str:
        return (f"boxes {100 * self.box_error:.1f}% of the side (at most {100 * BOX_TOLERANCE:g}%), confidences "
                f"{self.score_error:.3f} (at most {SCORE_TOLERANCE:g}), {self.nonfinite} not finite")


@torch.no_grad()
def check_amp(predict: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor, backend: Backend) -> AmpCheck:
    """Compare `predict` (decoded (B, N, 5+nc) rows [cx, cy, w, h, obj, classes...]) on `images` ((B, 3, S, S) in
    [0, 1], on the backend's device) in fp32 and under the backend's autocast."""
    reference = predict(images).float()
    with backend.autocast():
        mixed = predict(images).float()
    finite = torch.isfinite(reference).all(-1)
    nonfinite = int((finite & ~torch.isfinite(mixed).all(-1)).sum())
    confidence = [(rows[..., 4:5] * rows[..., 5:]).amax(-1) for rows in (reference, mixed)]
    both = finite & torch.isfinite(mixed).all(-1)
    score_error = float((confidence[0] - confidence[1]).abs()[both].max()) if both.any() else 0.0
    sure = both & (confidence[0] > CONFIDENT)
    box_error = float((reference[..., :4] - mixed[..., :4]).abs()[sure].max()) / images.shape[-1] if sure.any() else 0.0
    return AmpCheck(box_error, score_error, nonfinite)


def image_batch(path: Path, size: int, device: torch.device) -> torch.Tensor:
    """The image at `path` as a (1, 3, size, size) RGB batch in [0, 1] on `device` (stretched: the check needs no
    letterbox)."""
    image = cv2.resize(cv2.imread(str(path), cv2.IMREAD_COLOR), (size, size), interpolation=cv2.INTER_AREA)
    rgb = np.ascontiguousarray(image[:, :, ::-1])
    return torch.from_numpy(rgb).permute(2, 0, 1)[None].float().div(255).to(device)


# Autocast is kept by default only where it is this much faster than fp32: fp32 risks nothing, so a tie, or a gain a
# timing's noise could make, goes to fp32 (docs/benchmarks.md, "bf16 on the CPU").
CLEARLY_FASTER = 1.15
ROUNDS = 3  # at most, each one fp32 and one autocast step back to back (timed_enough: fewer)
BUDGET_SECONDS = 10.0  # a third round only while the timing, warm-up included, has taken less: it runs before every new key
# A first round this many times off CLEARLY_FASTER, either way, decides alone: the load on a shared 2-core machine
# swung one round's ratio 2.2x from the others' (docs/benchmarks.md, "bf16 on the CPU"), so a margin beyond that.
DECISIVE = 3.0
CACHE_FOLDER = "amp_speed"  # under the cache folder (--cache-dir, $DETECT_CACHE_DIR, the user cache)


@dataclasses.dataclass(frozen=True)
class AmpSpeed:
    """A training step's seconds in fp32 and under autocast, round by round (one of each, back to back), on one
    device; whether autocast is clearly faster there."""

    fp32_seconds: tuple[float, ...]
    amp_seconds: tuple[float, ...]
    dtype: str  # the autocast dtype as the precision line names it, "bf16"
    device: str  # what it was measured on, "CPU"

    @property
    def speedup(self) -> float:
        """Autocast's speed as a multiple of fp32's: the median over the rounds of fp32's seconds / autocast's (a
        round's two steps run back to back, so a load that comes and goes moves both)."""
        return statistics.median(fp32 / amp for fp32, amp in zip(self.fp32_seconds, self.amp_seconds, strict=True))

    @property
    def faster(self) -> bool:
        """Whether autocast is clearly faster: CLEARLY_FASTER times fp32's speed at least."""
        return self.speedup >= CLEARLY_FASTER

    def __str__(self) -> str:
        return f"{self.dtype} measured {self.speedup:.2f}x fp32 on this {self.device}"

    @classmethod
    def from_record(cls, record: dict) -> AmpSpeed:
        """What _keep wrote; a wrong field is a ValueError, KeyError or TypeError."""
        speed = cls(tuple(map(float, record["fp32_seconds"])), tuple(map(float, record["amp_seconds"])),
                    record["dtype"], record["device"])
        times = speed.fp32_seconds + speed.amp_seconds
        if not speed.fp32_seconds or len(speed.fp32_seconds) != len(speed.amp_seconds) or min(times) <= 0:
            raise ValueError("its seconds are not pairs of positive numbers")
        if not (isinstance(speed.dtype, str) and isinstance(speed.device, str)):
            raise TypeError("its dtype and device are not names")
        return speed


def _step_seconds(model: nn.Module, images: torch.Tensor, autocast: contextlib.AbstractContextManager,
                  backend: Backend) -> float:
    """Wall seconds of one forward (train mode) and backward of `model` on `images` under `autocast`."""
    started = time.perf_counter()
    with autocast:
        outputs = model(images)
    sum(output.float().square().mean() for output in outputs).backward()
    backend.synchronize()
    seconds = time.perf_counter() - started
    model.zero_grad(set_to_none=True)
    return seconds


def timed_enough(speedups: list[float], seconds: float) -> bool:
    """Whether rounds with these speedups (fp32's seconds / autocast's), timed in `seconds` with the warm-up, decide:
    ROUNDS of them; or one DECISIVE on its own; or two once BUDGET_SECONDS have passed."""
    if len(speedups) == 1:
        return max(speedups[0] / CLEARLY_FASTER, CLEARLY_FASTER / speedups[0]) >= DECISIVE
    return len(speedups) >= ROUNDS or (len(speedups) == 2 and seconds >= BUDGET_SECONDS)


def time_amp(model: nn.Module, backend: Backend, batch_size: int, imgsz: int) -> AmpSpeed:
    """A copy of `model`'s training step (forward in train mode and backward; the loss and the optimizer run in fp32
    either way) timed on random (batch_size, 3, imgsz, imgsz) images in fp32 and under `backend`'s autocast,
    alternating: a warm-up step of each (kernels picked, memory allocated), then rounds until timed_enough. `model`,
    its batch norm statistics and the global RNG are left as they were."""
    timed = copy.deepcopy(model).train()
    images = torch.rand(batch_size, 3, imgsz, imgsz, generator=torch.Generator().manual_seed(0)).to(backend.device)
    if backend.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    backend.prepare_steps()  # as the training steps run: memory kept between steps
    precisions = (contextlib.nullcontext, backend.autocast)
    started = time.perf_counter()
    for autocast in precisions:
        _step_seconds(timed, images, autocast(), backend)
    rounds: list[tuple[float, ...]] = []
    while not timed_enough([fp32 / amp for fp32, amp in rounds], time.perf_counter() - started):
        rounds.append(tuple(_step_seconds(timed, images, autocast(), backend) for autocast in precisions))
    fp32, amp = zip(*rounds, strict=True)
    return AmpSpeed(fp32, amp, backend.precision().split()[0], backend.name.upper())


def _cache_key(model: nn.Module, backend: Backend, batch_size: int, imgsz: int) -> dict:
    """What a timing holds for: the device's model name, the host CPU's flags, torch's version and threads (one
    Xeon timed bf16 1.44x fp32 on one thread and 0.15x on two: docs/benchmarks.md, "bf16 on the CPU"), the
    network's layers (its repr, hashed), the batch, the image size and the autocast dtype."""
    return {"device": backend.device_name(), "flags": " ".join(sorted(cpu.cpu_flags())), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "model": hashlib.sha256(repr(model).encode()).hexdigest()[:16],
            "batch_size": batch_size, "imgsz": imgsz, "dtype": str(backend.amp_dtype)}


def amp_speed(model: nn.Module, backend: Backend, batch_size: int, imgsz: int, cache_folder: Path) -> AmpSpeed:
    """The timing kept in `cache_folder` for this device, torch, threads, model, batch and size, else time_amp's, then
    kept there; one line gives the figures and the file."""
    key = _cache_key(model, backend, batch_size, imgsz)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(cache_folder) / CACHE_FOLDER / f"{digest}.json"
    speed = _read_kept(path, key)
    if speed is not None:
        LOGGER.info("AMP timing: %s, kept in %s (delete it to time again)", speed, path)
        return speed
    started = time.perf_counter()
    speed = time_amp(model, backend, batch_size, imgsz)
    rounds = len(speed.fp32_seconds)
    LOGGER.info("AMP timing: a training step at batch %d, %dx%d: fp32 %.3f s, %s %.3f s (medians of %d round%s, %.1f s "
                "in all): %s; kept in %s", batch_size, imgsz, imgsz, statistics.median(speed.fp32_seconds),
                speed.dtype, statistics.median(speed.amp_seconds), rounds, "s" * (rounds > 1),
                time.perf_counter() - started, speed, _keep(path, key, speed))
    return speed


def _read_kept(path: Path, key: dict) -> AmpSpeed | None:
    """The timing in `path` if it was kept for `key`; None where there is none, one warning where it is unreadable."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        if record["key"] != key:
            raise ValueError("it was kept for another device, model or size")
        return AmpSpeed.from_record(record)
    except (OSError, ValueError, KeyError, TypeError) as error:
        LOGGER.warning("AMP timing: %s is unreadable (%s): timing again", path, error)
        return None


def _keep(path: Path, key: dict, speed: AmpSpeed) -> str:
    """Write `speed` to `path` for `key` (whole or not at all); where it went, or why it did not."""
    record = {"key": key, "measured": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              **dataclasses.asdict(speed)}
    try:
        write_text(path, json.dumps(record, indent=1) + "\n", cache=True)  # a cache: the writer makes its folder
    except OSError as error:
        return f"not kept ({error}): timed again next run"
    return str(path)
