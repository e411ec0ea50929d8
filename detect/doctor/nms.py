"""`python -m detect.doctor --nms [--weights W] [--data D] [--imgsz N] [--batch-size B] [--device npu:0]`: NMS of one
real validation batch (the model's decoded rows for the first batch of the val split) on the device against the host,
at validation's settings: whether the two keep the same detections, each one's median time over alternating calls,
and which `--nms-device` to use, in one line (docs/torch-npu.md, "First hour"). op-plugin's page for npu_nms_v4 marks it
for deprecation, no longer maintained, its accuracy and speed not guaranteed: the device's NMS is chosen only where it
keeps the same detections and is clearly faster.

Exit code 0: both ran (the verdict says which to use); 1: the device's NMS could not run; 2: bad flags or files."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator

import torch

from detect.backend import Backend
from detect.backend import select as select_backend
from detect.data import ValLoaderSettings
from detect.data.device_batch import to_device_batch
from detect.errors import UserError
from detect.evaluation.scoring import ScoredSplit, prepare_scoring
from detect.inference.predictor import Predictor

# Validation's NMS (docs/yolov5.md, "NMS"): the most candidates, so the kernels' difference shows.
SETTINGS = {"conf_threshold": 0.001, "iou_threshold": 0.6, "max_det": 300}
# The device's NMS must beat the host's by this much to be chosen: a tie goes to the host, whose kernel is maintained
# and exact (the same rule as the CPU's precision: a small, noisy gain is not worth a risk).
CLEARLY_FASTER = 1.15
REPEATS = 5


@contextlib.contextmanager
def nms_on_host(backend: Backend, on_host: bool) -> Iterator[None]:
    """The backend's NMS on the host (or on its device) for the block."""
    before, backend.nms_on_host = backend.nms_on_host, on_host
    try:
        yield
    finally:
        backend.nms_on_host = before


def _rows(found: list[torch.Tensor]) -> set[tuple]:
    """Each image's detections as rounded (image, x1, y1, x2, y2, score, class) rows, order aside."""
    return {(index, *(round(float(value), 3) for value in row)) for index, rows in enumerate(found)
            for row in rows.float().cpu()}


def _timed(backend: Backend, run) -> tuple[float, list[torch.Tensor]]:
    backend.synchronize()
    started = time.perf_counter()
    found = run()
    backend.synchronize()
    return 1000 * (time.perf_counter() - started), found


def verdict(differ: int, device_ms: float, host_ms: float) -> str:
    """Which --nms-device to use and why, from the detections that differ and the two median times."""
    if differ:
        return (f"use --nms-device cpu: the device's NMS kept {differ} detection(s) the host's did not (or dropped "
                f"them); npu_nms_v4's accuracy is not guaranteed (op-plugin)")
    speedup = host_ms / max(device_ms, 1e-9)
    if speedup >= CLEARLY_FASTER:
        return f"use --nms-device device (the default): the same detections, {speedup:.2f}x the host's speed"
    return (f"use --nms-device cpu: the same detections, the device's NMS {speedup:.2f}x the host's speed (a tie goes "
            f"to the host's maintained kernel)")


def compare(weights: str, data: str, imgsz: int, batch_size: int, device: str) -> int:
    """Print the comparison and the verdict for one validation batch; 1 when the device's NMS cannot run."""
    backend = select_backend(device, amp=False)
    if backend.name == "cpu":
        raise UserError(f"--nms compares an accelerator's NMS with the host's; --device {device} is the host")
    backend.set_device()
    predictor, loader = prepare_scoring(weights, ScoredSplit(data), backend, ValLoaderSettings(imgsz, batch_size, 0))
    if not isinstance(predictor, Predictor) or predictor.did_nms:
        raise UserError(f"{weights}: its NMS is in its graph, not ours; --nms needs a model whose rows we suppress")
    batch = next(iter(loader))
    with torch.no_grad():
        output = predictor.predict(to_device_batch(batch, backend).images)
    times: dict[bool, list[float]] = {False: [], True: []}
    found: dict[bool, list[torch.Tensor]] = {}
    try:  # the first call on the device: where ACL_OP_INIT_MODE=2 turns its kernel off
        predictor.detections(output, backend, **SETTINGS)
    except UserError as error:
        print(f"NMS on {backend.device} cannot run: {error}")
        print("verdict: use --nms-device cpu")
        return 1
    for _ in range(REPEATS):
        for on_host in (False, True):
            with nms_on_host(backend, on_host):
                milliseconds, found[on_host] = _timed(backend, lambda: predictor.detections(output, backend,
                                                                                             **SETTINGS))
            times[on_host].append(milliseconds)
    device_ms, host_ms = statistics.median(times[False]), statistics.median(times[True])
    device_rows, host_rows = _rows(found[False]), _rows(found[True])
    differ = len(device_rows ^ host_rows)
    print(f"NMS of one validation batch ({len(batch)} images of {data}, {imgsz} px, {weights}; conf "
          f"{SETTINGS['conf_threshold']}, IoU {SETTINGS['iou_threshold']}; median of {REPEATS}): {backend.device} "
          f"{device_ms:.2f} ms, host {host_ms:.2f} ms; detections {len(device_rows)} and {len(host_rows)}, "
          f"{differ} differ")
    print(f"verdict: {verdict(differ, device_ms, host_ms)}")
    return 0
