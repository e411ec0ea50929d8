"""What a training step adds to distil (training/step.py runs it): the teacher on the step's device, in eval mode with
no gradients and outside DistributedDataParallel; the projectors, one 1x1 convolution per level from the student's
channels to the teacher's, trained with the student (in its optimizer's groups and in last.pt, never in best.pt); the
term asked (terms.py) times its gain; and their state for last.pt."""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from detect.models import DetectionModel
from detect.training.distill.teacher import Distillation
from detect.training.distill.terms import feature_term, logit_term
from detect.training.distributed import DistContext, average_gradients, broadcast_tensors

Taught = tuple[list[Tensor], list[Tensor]]  # the teacher's raw outputs and the maps its head read, per level


def projectors(student: DetectionModel, teacher: DetectionModel) -> nn.ModuleList:
    """One bias-free 1x1 convolution per level, from the student's channels to the teacher's (a bias would be taken
    away again by the normalisation that follows: terms.normalised)."""
    return nn.ModuleList(nn.Conv2d(ours, theirs, 1, bias=False)
                         for ours, theirs in zip(student.head_channels, teacher.head_channels, strict=True))


@dataclasses.dataclass(frozen=True)
class DistillPart:
    """The teacher, the projectors and the term's settings, on the step's device."""

    teacher: DetectionModel
    projectors: nn.ModuleList
    student_anchors: torch.Tensor  # the student's live anchors buffer (AutoAnchor rewrites it in place): never a copy
    mode: str
    gain: float
    until_epoch: int  # the term is on in the epochs before it
    teacher_path: str
    teacher_sha256: str

    @classmethod
    def for_student(cls, student: DetectionModel, distillation: Distillation, device: torch.device,
              channels_last: bool) -> DistillPart:
        """The teacher moved to `device`, frozen, its BatchNorms folded into their convolutions (it only ever runs in
        eval mode: the same maps, fewer ops), and new projectors for `student` (already on `device`; none for the
        logit term alone)."""
        teacher = distillation.teacher.model.to(device).eval().fuse().requires_grad_(False)
        # the logit term compares the heads' outputs: no maps to project
        projecting = (nn.ModuleList() if distillation.mode == "logit" else projectors(student, teacher)).to(device)
        if channels_last:
            teacher, projecting = (module.to(memory_format=torch.channels_last) for module in (teacher, projecting))
        return cls(teacher, projecting, student.detect.anchors, distillation.mode, distillation.gain,
                   distillation.until_epoch, distillation.teacher.path, distillation.teacher.sha256)

    def describe(self, epochs: int) -> str:
        """One line of what the run distils, from what, with what gain, until when (of its `epochs`)."""
        off = epochs - self.until_epoch
        until = f", off for the last {off} of {epochs} epochs" if off else ""
        terms = "the feature and logit terms" if self.mode == "both" else f"the {self.mode} term"
        parameters = sum(parameter.numel() for parameter in self.teacher.parameters())
        return (f"distillation: {terms} from the teacher {self.teacher_path} (sha256 {self.teacher_sha256[:12]}, "
                f"{parameters:,} parameters, eval mode, no gradients), gain {self.gain:g}{until}")

    def on_in(self, epoch: int) -> bool:
        """Whether the term is on in `epoch` (0-based)."""
        return epoch < self.until_epoch

    def teach(self, images: Tensor) -> Taught:
        """The teacher's raw outputs and head inputs for `images`, with no gradients (under the step's autocast)."""
        with torch.no_grad():
            return self.teacher(images, with_head_inputs=True)

    def term(self, outputs: list[Tensor], maps: list[Tensor], taught: Taught) -> Tensor:
        """The distillation term of the student's raw outputs and head inputs against the teacher's, times the gain
        (0-D, fp32)."""
        teacher_raw, teacher_maps = taught
        total = outputs[0].new_zeros((), dtype=torch.float32)
        if self.mode in ("feature", "both"):
            projected = [projector(level) for projector, level in zip(self.projectors, maps, strict=True)]
            total = total + feature_term(projected, teacher_maps, teacher_raw)
        if self.mode in ("logit", "both"):
            total = total + logit_term(outputs, teacher_raw, self.student_anchors, self.teacher.detect.anchors)
        return total * self.gain

    def in_job(self, context: DistContext) -> None:
        """Every rank's projectors start as the main rank's (each rank seeded its own: training/setup/build.py)."""
        broadcast_tensors(context, self.projectors.parameters(), "the broadcast of the main rank's projectors")

    def average_gradients(self, context: DistContext) -> None:
        """The projectors' gradients averaged over the ranks, as DDP does for the student's (they are outside it)."""
        average_gradients(context, self.projectors.parameters(), "the all-reduce of the projectors' gradients")

    def state(self) -> dict:
        """What last.pt keeps: the teacher's hash (a resume checks it) and the projectors' weights."""
        return {"teacher_sha256": self.teacher_sha256,
                "projectors": {name: tensor.detach().cpu() for name, tensor in self.projectors.state_dict().items()}}

    def restore(self, state: dict) -> None:
        """Put back what state() saved."""
        self.projectors.load_state_dict(state["projectors"])
