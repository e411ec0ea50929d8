"""The loss teaches the model: plain SGD on one batch drives it to find those boxes (box order, units, anchors and
target normalisation all have to agree for this to happen)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from detect.backend import select
from detect.config import Hyp
from detect.data import (
    AugmentSettings,
    TrainLoaderSettings,
    ValLoaderSettings,
    build_train_loader,
    build_val_loader,
    load_data_config,
    load_split,
)
from detect.data.device_batch import to_device_batch
from detect.evaluation.evaluator import CocoEvaluator
from detect.evaluation.val_loop import EvalSettings, PassOptions, evaluate
from detect.models import build_model
from detect.training.loss import DetectionLoss, LossSettings
from tests.training.helpers import tiny_dataset

pytestmark = pytest.mark.slow


@pytest.fixture
def one_thread():
    """The arithmetic of one thread: the same sums in the same order whatever the machine's or OMP_NUM_THREADS's
    thread count (200 steps of SGD magnify the last bit of a reduction order into a different model)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_one_batch_is_learned(tmp_path, one_thread):
    torch.manual_seed(0)
    hyp = dataclasses.replace(Hyp(), mosaic=0.0, scale=0.0, translate=0.0, fliplr=0.0, hsv_h=0.0, hsv_s=0.0,
                              hsv_v=0.0, albumentations_p=0.0)
    data = load_data_config(tiny_dataset(tmp_path))
    loader = build_train_loader(load_split(data, "train"),
                                TrainLoaderSettings(AugmentSettings.from_hyp(hyp), 128, 8, 0, seed=0, pin_memory=False))
    backend = select("cpu")
    batch = to_device_batch(next(iter(loader)), backend)
    model = build_model("yolov5n.yaml", num_classes=3)
    criterion = DetectionLoss(LossSettings.from_hyp(hyp, 3, 3, 128), model.detect.anchors, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    first = None
    for _ in range(200):
        loss, items = criterion(model(batch.images), batch.padded_targets)
        first = items if first is None else first
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert items.sum() < first.sum() / 3, (first, items)
    model.eval()
    val = build_val_loader(load_split(data, "val"), ValLoaderSettings(128, 8, 0, pin_memory=False))
    result = evaluate(model.predict, val, backend, CocoEvaluator.for_split(val.split), EvalSettings(),
                      PassOptions(progress=False))
    # An untrained model scores about 0.03, 100 steps 0.18. Spread of 200 steps over torch seeds 0-9 on one thread
    # (2026-12-03, this 2-core machine): 0.737 (seed 0, the one used here), 0.924-1.0 for the others; 0.668 was
    # seen on another machine with its default threads. 0.5 is below all of them and far above a broken loss.
    assert result.metrics.map50 > 0.5
