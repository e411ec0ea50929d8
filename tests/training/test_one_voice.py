"""Which rank of a job speaks: the one that writes the run, known only once the job agreed on it."""

from __future__ import annotations

import logging

import pytest

from detect.training.distributed import DistContext, one_voice


@pytest.fixture
def root_level():
    root = logging.getLogger()
    level = root.level
    yield root
    root.setLevel(level)


def test_after_a_rank_swap_the_writing_rank_speaks_and_rank_0_is_quiet(root_level):
    # An elastic restart gave global rank 0 to the node without the run folder: rank 1 holds it and writes.
    one_voice(DistContext(rank=1, world_size=2, main_rank=0))  # before the job agreed: RANK decides
    assert root_level.level == logging.WARNING
    one_voice(DistContext(rank=1, world_size=2, main_rank=1))  # after share_resume_point
    assert root_level.level == logging.INFO
    one_voice(DistContext(rank=0, world_size=2, main_rank=1))
    assert root_level.level == logging.WARNING


def test_a_single_process_keeps_its_logging(root_level):
    root_level.setLevel(logging.ERROR)
    one_voice(DistContext())
    assert root_level.level == logging.ERROR
