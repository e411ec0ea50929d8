"""Validation by sliced inference: scored on the original images and labels, an image past the window bound named and
left out, and two ranks' shards scoring as one process."""

from __future__ import annotations

import pytest

from detect import backend as backends
from detect.data import ValLoaderSettings, build_val_loader, load_data_config, load_split
from detect.data.tiles.windows import TileSettings
from detect.evaluation.evaluator import CocoEvaluator
from detect.evaluation.val_loop import PassOptions, evaluate, merge_shards, predict_shard, score
from detect.inference.predictor import Predictor
from detect.inference.slicing import SlicedPredictor, SliceSettings
from tests.data.helpers import write_sample, write_yaml
from tests.inference.test_slicing import WhiteBoxes

CPU = backends.select("cpu", amp=False)
QUIET = PassOptions(progress=False)
# white boxes on black, each image's boxes apart; several cross a seam of the 128 px windows (x = 91..128)
BOXES = {"a": [(60, 20, 160, 50), (300, 230, 310, 245)], "b": [(100, 100, 140, 140)], "c": [(5, 5, 60, 40)]}


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    root = tmp_path_factory.mktemp("sliced")
    for name, boxes in BOXES.items():
        write_sample(root, "train", name, 300, 400 if name != "c" else 120, boxes, classes=[0] * len(boxes))
    return load_split(load_data_config(write_yaml(root, names=("box",))), "train")


def sliced_loader(split, windows: TileSettings, rank: int = 0, world_size: int = 1):
    return build_val_loader(split, ValLoaderSettings(128, 4, 0, pin_memory=False, windows=windows, rank=rank,
                                                     world_size=world_size))


def predictor(merge: str = "seam") -> SlicedPredictor:
    return SlicedPredictor(Predictor(WhiteBoxes()), CPU, SliceSettings(128, 0.25, merge=merge), 32)


def test_sliced_val_scores_the_original_images_and_labels(split):
    loader = sliced_loader(split, TileSettings(128, 0.25))
    batch = next(iter(loader))
    assert len(batch) == 1 and batch.letterbox[0].gain == 1.0  # one full-resolution image a batch
    result = evaluate(predictor(), loader, CPU, CocoEvaluator.for_split(split), options=QUIET)
    assert result.metrics.map50 == pytest.approx(1.0) and result.metrics.map50_95 == pytest.approx(1.0)
    halves = evaluate(predictor("nms"), loader, CPU, CocoEvaluator.for_split(split), options=QUIET)
    assert halves.metrics.map50 < 0.9  # the halves of the box across a seam: a miss and two false positives


def test_an_image_past_the_window_bound_is_named_and_left_out(split):
    loader = sliced_loader(split, TileSettings(128, 0.25, max_windows=6))  # a and b need 12 windows, c 3
    result = evaluate(predictor(), loader, CPU, CocoEvaluator.for_split(split), options=QUIET)
    assert len(result.problems) == 2
    assert result.problems[0].endswith("400x300 needs 12 windows of 128 px at overlap 0.25, more than --max-windows 6")
    assert result.metrics.map50 == pytest.approx(1.0)  # c alone is scored


def test_two_ranks_shards_score_as_one_process(split):
    windows = TileSettings(128, 0.25)
    alone = evaluate(predictor(), sliced_loader(split, windows), CPU, CocoEvaluator.for_split(split), options=QUIET)
    shards = [predict_shard(predictor(), sliced_loader(split, windows, rank, 2), CPU, progress=False)
              for rank in (0, 1)]
    assert [len(shard.batches) for shard in shards] == [2, 1]
    joined = score(merge_shards(shards), CocoEvaluator.for_split(split))
    assert joined.metrics.stats == alone.metrics.stats and joined.images == 3
