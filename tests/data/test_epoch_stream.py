"""The training loader's one stream of batches across epochs: the workers run on into the next epoch, and what they
give is what a fresh loader gives for that epoch (or from a batch inside it)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from detect.config import Hyp
from detect.data import AugmentSettings, TrainLoaderSettings, build_train_loader, load_data_config, load_split
from tests.data.helpers import simple_dataset

AUGMENT = AugmentSettings.from_hyp(dataclasses.replace(Hyp(), albumentations_p=0.0))


def _epoch(loader, epoch: int, start_batch: int = 0) -> list[torch.Tensor]:
    loader.set_epoch(epoch, start_batch)
    return [batch.images for batch in loader]


def test_consecutive_epochs_share_one_stream_and_match_a_fresh_loader(tmp_path):
    config = load_data_config(simple_dataset(tmp_path, count=12))

    def build():
        return build_train_loader(load_split(config, "train"),
                                  TrainLoaderSettings(AUGMENT, 64, 4, 2, seed=3, pin_memory=False))

    running = build()
    first = _epoch(running, 0)
    stream = running._stream
    second = _epoch(running, 1)
    assert running._stream is stream  # no new iterator: the workers went on into epoch 1
    fresh = build()
    for expected, got in zip(_epoch(fresh, 1), second, strict=True):
        assert torch.equal(expected, got)
    assert not all(torch.equal(a, b) for a, b in zip(first, second))  # another epoch, another order


def test_a_start_inside_the_epoch_gives_the_rest_of_that_epoch(tmp_path):
    config = load_data_config(simple_dataset(tmp_path, count=12))
    whole = _epoch(build_train_loader(load_split(config, "train"),
                                      TrainLoaderSettings(AUGMENT, 64, 4, 0, seed=3, pin_memory=False)), 2)
    rest = _epoch(build_train_loader(load_split(config, "train"),
                                     TrainLoaderSettings(AUGMENT, 64, 4, 2, seed=3, pin_memory=False)), 2,
                  start_batch=1)
    assert len(whole) == 3 and len(rest) == 2
    assert all(torch.equal(a, b) for a, b in zip(whole[1:], rest, strict=True))


def test_a_stream_left_mid_epoch_starts_again_where_it_is_asked(tmp_path):
    config = load_data_config(simple_dataset(tmp_path, count=12))
    loader = build_train_loader(load_split(config, "train"),
                                TrainLoaderSettings(AUGMENT, 64, 4, 2, seed=3, pin_memory=False))
    loader.set_epoch(0)
    next(iter(loader))  # a stop after one batch
    again = _epoch(loader, 0)
    fresh = _epoch(build_train_loader(load_split(config, "train"),
                                      TrainLoaderSettings(AUGMENT, 64, 4, 0, seed=3, pin_memory=False)), 0)
    assert all(torch.equal(a, b) for a, b in zip(fresh, again, strict=True))


def test_a_started_stream_is_the_one_the_epoch_takes_and_the_global_rng_is_untouched(tmp_path, monkeypatch):
    # A run starts its workers before it builds the model, whose initialisation must not see a different RNG.
    config = load_data_config(simple_dataset(tmp_path, count=12))
    loader = build_train_loader(load_split(config, "train"),
                                TrainLoaderSettings(AUGMENT, 64, 4, 2, seed=3, pin_memory=False))
    state = torch.random.get_rng_state()
    loader.start(1, start_batch=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    restarts = []
    monkeypatch.setattr(loader.sampler, "start", lambda *position: restarts.append(position))
    started = [batch.images for batch in loader]
    assert restarts == []  # the epoch took the started workers' batches: the stream was not set back and refilled
    settings = TrainLoaderSettings(AUGMENT, 64, 4, 0, seed=3, pin_memory=False)
    fresh = _epoch(build_train_loader(load_split(config, "train"), settings), 1, start_batch=1)
    assert len(started) == 2 and all(torch.equal(a, b) for a, b in zip(fresh, started, strict=True))


@pytest.mark.parametrize("split", ["train", "val"])
def test_a_process_with_a_stream_left_open_exits(tmp_path, split: str):
    # Its workers ignore SIGTERM (a scheduler's stop is the main process's to handle), so the exit ends them itself;
    # a validation loader's persistent workers as well (a script that keeps one at module level).
    data = simple_dataset(tmp_path, count=12)
    build = {"train": "build_train_loader(load_split(config, 'train'), "
                      "TrainLoaderSettings(AugmentSettings.from_hyp(Hyp()), 64, 4, 2, pin_memory=False))",
             "val": "build_val_loader(load_split(config, 'val'), ValLoaderSettings(64, 4, 2, pin_memory=False))"}[split]
    script = textwrap.dedent(f"""
        from detect.config import Hyp
        from detect.data import (AugmentSettings, TrainLoaderSettings, ValLoaderSettings, build_train_loader,
                                 build_val_loader, load_data_config, load_split)
        config = load_data_config({str(data)!r})
        loader = {build}
        loader.set_epoch(0)
        next(iter(loader))
        keep = [loader, loader]  # kept alive until the interpreter exits
    """)
    finished = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                              timeout=60)
    assert finished.returncode == 0, finished.stderr


def test_worker_pids_name_the_streams_running_workers(tmp_path):
    loader = build_train_loader(load_split(load_data_config(simple_dataset(tmp_path, count=8)), "train"),
                                TrainLoaderSettings(AUGMENT, 64, 4, 2, seed=0, pin_memory=False))
    assert loader.worker_pids() == []
    next(iter(loader))
    pids = loader.worker_pids()
    assert len(pids) == 2 and all(os.waitpid(pid, os.WNOHANG) == (0, 0) for pid in pids)  # children, running
