"""`python -m detect.doctor --ops [--cfg yolov5s.yaml] [--npu-release 2.9]`: every op of each phase of training and
validation of a model yaml, and where an Ascend 910B with that torch_npu runs it (the installed one's kernel lists,
else the newest we ship), before anyone rents an hour on one (docs/torch-npu.md, "What runs where"). Exit code 0:
every op is covered; 1: some would run on the CPU."""

from __future__ import annotations

import torch

from detect.backend.npu_ops import COMPOSITE, HOST, MISSING, NPU, VIEW, chosen_lists
from detect.doctor.phases import PhaseOps, record_phases
from detect.errors import UserError, one_line
from detect.models import DetectionModel, build_model

STATUS = {NPU: "NPU", COMPOSITE: "COMP", VIEW: "VIEW", HOST: "HOST", MISSING: "CPU"}
LAYERS_SHOWN = 3


def build(cfg: str) -> DetectionModel:
    """The model of a yaml; one that cannot be built is a UserError in one line."""
    try:
        model = build_model(cfg)
    except UserError:
        raise
    except Exception as error:  # noqa: BLE001 (any failure of a user's yaml is one line, not a traceback)
        raise UserError(f"{cfg} cannot be built: {one_line(error)}") from None
    return model


def format_phase(phase: PhaseOps) -> list[str]:
    """The phase's title, then one line per op: status, name (indented under the composite that calls it), calls,
    the source that covers it, the layers it came from."""
    lines = [f"{phase.name}: {len(phase.ops)} ops"]
    for use in phase.ops.values():
        name = "  " * len(use.via) + use.op
        layers = [label for label, _ in use.layers.most_common()]
        shown = ", ".join(layers[:LAYERS_SHOWN]) + (f" +{len(layers) - LAYERS_SHOWN}" if len(layers) > LAYERS_SHOWN else "")
        lines.append(f"  {STATUS[use.verdict.kind]:<4} {name:<50} {use.count:>5}x  {use.verdict.source:<45} {shown}")
    return lines


def verdict(phases: list[PhaseOps]) -> str:
    """One line: every op runs on the NPU, or which would run on the CPU and where they come from."""
    uncovered = {}
    for phase in phases:
        for use in phase.uncovered:
            where = ", ".join(label for label, _ in use.layers.most_common(LAYERS_SHOWN))
            uncovered.setdefault(use.op, f"{use.op} ({phase.name}: {where})")
    if uncovered:
        return (f"verdict: NOT ON THE NPU: {len(uncovered)} op(s) would run on the CPU (torch-npu's fallback): "
                + "; ".join(uncovered.values()))
    count = len({use.op for phase in phases for use in phase.ops.values()})
    return (f"verdict: all {count} ops of {len(phases)} phases run on the NPU (NPU kernels, or torch composites and "
            f"views whose ops have NPU kernels)")


def report(cfg: str, release: str | None = None) -> int:
    """Print every phase's ops for the model of `cfg` with the kernel lists of the NPU release `release` (the installed
    one's, else the newest: chosen_lists) and the verdict; 1 when some op would run on the CPU."""
    model = build(cfg)
    imgsz = 2 * model.max_stride
    kernels, note = chosen_lists(release)
    if note:
        print(note)
    phases = record_phases(model, imgsz, kernels=kernels)
    print(f"ops of {cfg} on an Ascend NPU with {kernels.torch_npu_source} (recorded on the host: {imgsz} px, batch 2, "
          f"fp16 AMP; sources: the {kernels.torch_npu_source} wheel, {kernels.op_plugin_source}, torch "
          f"{torch.__version__.split('+')[0]}'s composites; NPU: a kernel, COMP: a composite whose calls follow, "
          "VIEW: no kernel needed, HOST: a kernel that runs on the CPU, CPU: none, torch-npu's CPU fallback)")
    for phase in phases:
        print("\n".join(format_phase(phase)))
    print(verdict(phases))
    return 1 if any(phase.uncovered for phase in phases) else 0
