"""Knowledge distillation (--teacher, docs/usage.md "Distillation"): the teacher read and checked with the run's
recipe (teacher.py), the terms (terms.py), and what the training step adds, the teacher part with its projectors
(part.py); the step (training/step.py) adds the term to the criterion's output."""

from detect.training.distill.part import DistillPart
from detect.training.distill.teacher import MODES, Distillation, Teacher

__all__ = ["MODES", "DistillPart", "Distillation", "Teacher"]
