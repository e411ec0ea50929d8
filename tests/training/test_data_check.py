"""A data yaml's splits are checked with the other inputs: a missing folder stops train before any work; under
torchrun each node's first rank checks the labels while the node's other ranks wait for its cache."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from detect import train
from detect.data.labels.check import DEFAULT_BOUNDS
from detect.training.distributed import DistContext
from detect.training.setup import build
from detect.training.setup.recipe import SplitCheck
from tests.data.helpers import write_yaml
from tests.training.helpers import tiny_dataset, train_args

CHECK = SplitCheck(single_cls=False, cache_dir=None, bounds=DEFAULT_BOUNDS)


@pytest.mark.parametrize("split", ["val", "train"])
def test_a_missing_split_folder_is_one_line_before_the_label_check(tmp_path, capsys, split):
    root = tmp_path / "data"
    tiny_dataset(root, count=4)
    data = write_yaml(root, **{split: "images/missing"})
    code = train.main(train_args(data, tmp_path / "runs", epochs=1))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    # The yaml, its key and the folder it names.
    assert f"{data}: '{split}' names {root / 'images' / 'missing'}, which does not exist" in err
    assert not (tmp_path / "runs").exists()  # no run folder, and no label check (its cache) of either split
    assert not list(root.rglob("*.cache"))


@pytest.mark.parametrize(("rank", "local_rank", "first"), [(0, 0, True), (1, 0, True), (1, 1, False), (3, 1, False)])
def test_each_nodes_first_rank_checks_the_labels_while_its_others_wait(monkeypatch, rank, local_rank, first):
    # Two nodes of two ranks: ranks 0 and 2 check at once (each node writes its own cache), 1 and 3 then load it.
    events = []
    monkeypatch.setattr(build, "patient_barrier", lambda context, name: events.append(name))
    monkeypatch.setattr(build, "load_split", lambda *args: events.append("check") or SimpleNamespace(cache_state="x"))
    monkeypatch.setattr(build, "gather_objects", lambda context, value: [value] * context.world_size)
    context = DistContext(rank=rank, world_size=4, local_rank=local_rank, local_world_size=2)
    build._checked_split(SimpleNamespace(remote=None, builtin=None), "train", CHECK, context)
    order = ["check", "train labels/first", "train labels/others"]
    assert events == (order if first else [order[1], order[0], order[2]])


@pytest.mark.parametrize(("rank", "local_rank", "events_expected"), [
    (0, 0, ["check", "train labels/job", "sent", "train labels/first", "train labels/others"]),  # the main rank
    (1, 1, ["train labels/job", "sent", "train labels/first", "check", "train labels/others"]),  # its node's other
    (2, 0, ["train labels/job", "sent", "kept", "check", "train labels/first", "train labels/others"]),  # node 1
    (3, 1, ["train labels/job", "sent", "train labels/first", "check", "train labels/others"])])
def test_a_buckets_split_on_two_nodes_is_checked_by_the_main_rank_alone(monkeypatch, tmp_path, rank, local_rank,
                                                                        events_expected):
    # The main rank's cache goes to every rank; each other node's first rank keeps it, then the node loads it.
    cache = tmp_path / "train-0123.detect.cache"
    cache.write_bytes(b"checked")
    events = []
    monkeypatch.setattr(build, "patient_barrier", lambda context, name: events.append(name))
    monkeypatch.setattr(build, "load_split", lambda *args: events.append("check") or SimpleNamespace(
        cache_state="x", cache_file=cache))
    monkeypatch.setattr(build, "broadcast_object", lambda context, value: events.append("sent") or (
        cache.name, b"checked"))
    kept = []
    bucket = SimpleNamespace(check_once_per_job=True,
                             keep_label_cache=lambda *sent: events.append("kept") or kept.append(sent))
    monkeypatch.setattr(build, "open_storage", lambda data, cache_dir: (data, bucket))
    monkeypatch.setattr(build, "gather_objects", lambda context, value: [value] * context.world_size)
    context = DistContext(rank=rank, world_size=4, local_rank=local_rank, local_world_size=2)
    build._checked_split(SimpleNamespace(remote="s3://b/data"), "train", CHECK, context)
    assert events == events_expected
    assert kept == ([(cache.name, b"checked")] if "kept" in events else [])
