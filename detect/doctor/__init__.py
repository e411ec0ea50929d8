"""`python -m detect.doctor`: is this machine ready to train? Versions and whether they pair, devices, process-group
backends and the environment variables that matter, then a verdict with hints. It only reads; no network.
`--ops [--cfg yolov5s.yaml] [--npu-release 2.9]`: instead, every op of each phase of training and validation of that
model and where an Ascend 910B with that torch_npu runs it (no NPU needed).
`--nms [--weights yolov5s.pt --data coco128.yaml --imgsz 640 --batch-size 32 --device auto]`: instead, NMS of one real
validation batch on the device against the host, and which --nms-device to use.

Exit code 0: ready (warnings allowed), with --ops every op runs on the NPU, with --nms both ran; 1: a problem (FAIL)
was found, with --ops some op would run on the CPU, with --nms the device's NMS cannot run; 2: bad flags, or a model
yaml or weights that cannot be read.
"""

from __future__ import annotations

import dataclasses
import os

from detect import cli
from detect.backend import SPEC_HELP
from detect.backend.environment import FAIL, WARN, Check
from detect.backend.probe import Diagnosis, diagnose
from detect.config import IMAGE_SIZE, POSITIVE, Settings, option
from detect.errors import UserError
from detect.models.weights import YOLOV5_DEFAULT_WEIGHTS


def format_check(check: Check) -> str:
    """`  STATUS topic  detail`, and the hint on a line of its own for warnings and failures."""
    line = f"  {check.status:<5} {check.topic:<30} {check.detail}"
    if check.hint and check.status in (WARN, FAIL):
        line += f"\n  {'':<5} {'':<30} -> {check.hint}"
    return line


def verdict(diagnosis: Diagnosis) -> str:
    """One line: ready or not, how many problems and warnings, and the device `--device auto` picks."""
    failures = sum(check.status == FAIL for check in diagnosis.checks)
    warnings = sum(check.status == WARN for check in diagnosis.checks)
    if diagnosis.accelerators:
        best = diagnosis.accelerators[0]
        names = ", ".join(sorted(set(best.devices)))
        group = f", {best.process_group} for several devices" if best.process_group else ", no process group"
        picks = f"{best.kind} ({len(best.devices)} x {names}{group})"
    else:
        picks = "cpu (no accelerator usable; gloo for several processes)"
    state = f"NOT READY: {failures} problem(s) marked FAIL" if failures else "ready"
    return f"verdict: {state}, {warnings} warning(s); --device auto picks {picks}"


@dataclasses.dataclass(frozen=True)
class DoctorSettings(Settings):
    """`python -m detect.doctor` reads the machine; --ops reads a model's ops instead."""

    ops: bool = option(False, "list every op of each phase of training and validation and where an Ascend 910B "
                              "with torch-npu runs it (exit 1 when some op would run on the CPU)")
    cfg: str | None = option(None, "with --ops: the model yaml (a bundled name or a path; default yolov5s.yaml)")
    npu_release: str | None = option(None, "with --ops: the torch-npu release whose kernel lists to read (2.9 or "
                                           "2.14; default: the installed one's, else the newest)")
    nms: bool = option(False, "NMS of one validation batch on the device against the host: the detections each keeps, "
                              "their times, and which --nms-device to use")
    weights: str = option(YOLOV5_DEFAULT_WEIGHTS, "with --nms: the model whose predictions are suppressed")
    data: str = option("coco128.yaml", "with --nms: the data yaml whose first val batch is used")
    imgsz: int = option(640, "with --nms: inference size, pixels", bound=IMAGE_SIZE)
    batch_size: int = option(32, "with --nms: the batch (validation's default)", bound=POSITIVE)
    device: str = option("auto", "with --nms: the accelerator; " + SPEC_HELP)


parse_args = cli.settings_reader(DoctorSettings, "python -m detect.doctor", __doc__)


def examine(settings: DoctorSettings) -> int:
    """Print every check and the verdict (with --ops: every op of the model); 1 when a check failed."""
    if (settings.cfg is not None or settings.npu_release is not None) and not settings.ops:
        raise UserError("--cfg and --npu-release go with --ops (the model whose ops to list, the lists to read)")
    if settings.ops and settings.nms:
        raise UserError("--ops and --nms are two reports: ask for one")
    if settings.ops:
        from detect.doctor import ops  # training code, loaded only for --ops

        return ops.report(settings.cfg or "yolov5s.yaml", settings.npu_release)
    if settings.nms:
        from detect.doctor import nms  # model and data code, loaded only for --nms

        return nms.compare(settings.weights, settings.data, settings.imgsz, settings.batch_size, settings.device)
    diagnosis = diagnose(os.environ)
    print("\n".join(format_check(check) for check in diagnosis.checks))
    print(verdict(diagnosis))
    return 1 if any(check.status == FAIL for check in diagnosis.checks) else 0


def main(argv: list[str] | None = None) -> int:
    """Exit code 0: ready (--ops: every op covered); 1: a check failed (--ops: an op would run on the CPU); 2: bad
    flags or a yaml that cannot be built."""
    return cli.run(lambda: examine(parse_args(argv)))


if __name__ == "__main__":
    cli.exit_process(main())
