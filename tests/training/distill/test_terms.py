"""The distillation terms and the step's teacher part: zero when the student is its teacher with identity
projectors, growing as they part; gradients reach the projectors and the student, never the teacher; the projectors in
the optimizer's groups; the term off for the hyp's last epochs."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from detect.backend import select
from detect.config import load_hyp
from detect.data.batch import noise_batch
from detect.data.device_batch import to_device_batch
from detect.models import build_model
from detect.training.distill import Distillation, DistillPart, Teacher
from detect.training.distill.terms import bernoulli_kl, feature_term, logit_term
from detect.training.optim import OptimSettings
from detect.training.step import StepRecipe, build_parts, for_epoch, forward_loss

MODES = ("feature", "logit", "both")
SIZE = 64


@pytest.fixture(scope="module")
def student():
    torch.manual_seed(0)
    return build_model("yolov5n.yaml", num_classes=3).eval()


@pytest.fixture(scope="module")
def images():
    return torch.rand(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


def identity_part(student, teacher, mode: str) -> DistillPart:
    """A part whose teacher is `teacher` as it is (not fused) and whose projectors are identities (the channels
    agree)."""
    part = DistillPart(teacher.eval().requires_grad_(False), torch.nn.ModuleList(), student.detect.anchors, mode, 1.0,
                       1, "teacher.pt", "")
    for channels in student.head_channels:
        projector = torch.nn.Conv2d(channels, channels, 1, bias=False)
        torch.nn.init.dirac_(projector.weight)
        part.projectors.append(projector)
    return part


@pytest.mark.parametrize("mode", MODES)
def test_the_term_is_zero_when_the_student_is_its_teacher_with_identity_projectors(student, images, mode):
    part = identity_part(student, copy.deepcopy(student), mode)
    outputs, maps = student(images, with_head_inputs=True)
    assert part.term(outputs, maps, part.teach(images)).item() == 0.0
    # the part as training builds it folds the teacher's BatchNorms: the same maps up to rounding
    built = DistillPart.for_student(student, Distillation(Teacher("same", "", copy.deepcopy(student)), mode, 1.0, 1),
                              torch.device("cpu"), channels_last=False)
    for projector, identity in zip(built.projectors, part.projectors if mode != "logit" else [], strict=True):
        projector.weight.data.copy_(identity.weight)
    assert 0.0 <= built.term(outputs, maps, built.teach(images)).item() < 1e-6


@pytest.mark.parametrize("mode", MODES)
def test_the_term_grows_as_the_student_parts_from_its_teacher(student, images, mode):
    part = identity_part(student, copy.deepcopy(student), mode)
    moved = copy.deepcopy(student)
    terms = []
    for scale in (0.003, 0.01, 0.03):
        with torch.no_grad():
            for parameter, original in zip(moved.parameters(), student.parameters(), strict=True):
                generator = torch.Generator().manual_seed(2)
                parameter.copy_(original + scale * torch.randn(parameter.shape, generator=generator))
        outputs, maps = moved(images, with_head_inputs=True)
        terms.append(part.term(outputs, maps, part.teach(images)).item())
    assert 0 < terms[0] < terms[1] < terms[2], terms


def test_the_terms_are_exactly_zero_for_equal_tensors_and_positive_otherwise():
    generator = torch.Generator().manual_seed(3)
    maps = [torch.randn(2, 8, size, size, generator=generator) for size in (8, 4)]
    raw = [torch.randn(2, 3, size, size, 8, generator=generator) for size in (8, 4)]
    anchors = torch.rand(2, 3, 2, generator=generator) + 0.5
    assert feature_term(maps, [m.clone() for m in maps], raw).item() == 0.0
    assert logit_term(raw, [r.clone() for r in raw], anchors, anchors.clone()).item() == 0.0
    assert feature_term([m + 0.5 * torch.randn(m.shape, generator=generator) for m in maps], maps, raw).item() > 0
    assert logit_term(raw, raw, anchors, anchors * 2).item() > 0  # another model's anchors: other boxes
    student, teacher = torch.meshgrid(torch.linspace(-8, 8, 33), torch.linspace(-8, 8, 33), indexing="ij")
    divergence = bernoulli_kl(student, teacher)
    assert divergence.diagonal().abs().max().item() == 0.0 and divergence.min().item() > -1e-6


def _parts(student, teacher, mode: str = "feature", until_epoch: int = 10):
    hyp = load_hyp()
    distillation = Distillation(Teacher("teacher.pt", "", teacher), mode, 1.0, until_epoch)
    recipe = StepRecipe(hyp, OptimSettings.from_hyp(hyp), 4, SIZE, distill=distillation)
    return build_parts(copy.deepcopy(student).train(), select("cpu", amp=False), recipe)


@pytest.mark.parametrize("mode", MODES)
def test_gradients_reach_the_projectors_and_the_student_never_the_teacher(student, mode):
    torch.manual_seed(4)
    teacher = build_model("yolov5s.yaml", num_classes=3)  # wider: projectors from 64/128/256 to 128/256/512 channels
    parts = _parts(student, teacher, mode)
    batch = to_device_batch(noise_batch(4, SIZE, 3, seed=0), parts.backend)
    loss, items = forward_loss(parts, batch)
    assert items.shape == (4,) and items[3] > 0  # box, obj, cls, distill
    loss.backward()
    assert all(parameter.grad is None and not parameter.requires_grad for parameter in parts.distill.teacher.parameters())
    projected = list(parts.distill.projectors.parameters())
    assert len(projected) == (0 if mode == "logit" else 3)  # the logit term alone projects nothing
    assert all(parameter.grad.abs().sum() > 0 for parameter in projected)
    # the term alone moves the student: its neck through the maps, its head through the outputs (logit)
    parts.train_model.zero_grad(set_to_none=True)
    outputs, maps = parts.train_model(batch.images, with_head_inputs=True)
    parts.distill.term(outputs, maps, parts.distill.teach(batch.images)).backward()
    neck = parts.train_model.model[-2].cv3.conv.weight  # the last C3 before the head: it makes the P5 map
    head = parts.train_model.detect.m[0].weight
    assert neck.grad.abs().sum() > 0
    assert (head.grad is not None and head.grad.abs().sum() > 0) == (mode != "feature")


def test_the_projectors_join_the_optimizer_groups_and_their_norm_is_clipped(student):
    parts = _parts(student, build_model("yolov5s.yaml", num_classes=3))
    groups = [{id(parameter) for parameter in group["params"]} for group in parts.optimizer.param_groups]
    projected = {id(parameter) for parameter in parts.distill.projectors.parameters()}
    assert projected <= groups[1]  # weights with decay, as the model's convolutions (bias-free: none in groups[0])
    assert len(groups[0] | groups[1] | groups[2]) == len(list(parts.train_model.parameters())) + len(projected)


def test_the_term_is_off_in_the_last_epochs(student):
    parts = _parts(student, copy.deepcopy(student), until_epoch=2)
    assert for_epoch(parts, 1) is parts and parts.loss_terms == 4
    off = for_epoch(parts, 2)
    assert off.distill is None and off.loss_terms == 3 and off.train_model is parts.train_model
    batch = to_device_batch(noise_batch(4, SIZE, 3, seed=0), parts.backend)
    assert forward_loss(off, batch)[1].shape == (3,)
    assert dataclasses.replace(off, distill=parts.distill).loss_terms == 4
