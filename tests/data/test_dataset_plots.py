"""Plots: label statistics and an augmented batch grid are written as PNG images of the expected size."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import cv2
import numpy as np

from detect.config import Hyp
from detect.data import AugmentSettings, TrainLoaderSettings, build_train_loader, load_data_config, load_split
from detect.data.dataset_plots import plot_batch, plot_label_stats
from detect.data.records import ImageRecord
from tests.data.helpers import simple_dataset


def test_plots_write_pngs(tmp_path: Path) -> None:
    config = load_data_config(simple_dataset(tmp_path / "set", count=4))
    augmentation = AugmentSettings.from_hyp(Hyp(albumentations_p=0.0))
    loader = build_train_loader(load_split(config, "train"),
                                TrainLoaderSettings(augmentation, 64, 4, 0, seed=0, pin_memory=False))
    batch = next(iter(loader))
    grid = cv2.imread(str(plot_batch(batch, list(config.names), tmp_path / "batch.png")))
    assert grid.shape == (128, 128, 3)
    # the grid's first tile is the batch's first image (RGB -> BGR), the boxes drawn over a few of its pixels
    first = batch.images[0].permute(1, 2, 0).numpy()[:, :, ::-1].astype(np.int16)
    assert np.median(np.abs(grid[:64, :64].astype(np.int16) - first)) < 8 and grid[:64, :64].std() > 1
    stats = cv2.imread(str(plot_label_stats(loader.split.records, list(config.names), tmp_path / "labels.png")))
    assert stats is not None and stats.shape[1] > stats.shape[0]


def test_no_device_literals_in_data() -> None:
    package = Path(__file__).resolve().parents[2] / "detect" / "data"
    for source in package.rglob("*.py"):
        text = source.read_text()
        for literal in ('"cuda', "'cuda", '"npu', "'npu", "torch.cuda", "torch_npu"):
            assert literal not in text, f"{source}: device literal {literal}"


def test_label_stats_draw_class_names_as_written(tmp_path: Path) -> None:
    """Class names are file text: '$...$' would be matplotlib math, whose parse error used to fail the whole plot."""
    config = load_data_config(simple_dataset(tmp_path / "set", count=2))
    records = list(load_split(config, "train").records)
    names = ["$\\frac{$", "$\\undefined$", "a\nb", "", "../../x", "$"]
    stats = cv2.imread(str(plot_label_stats(records, names, tmp_path / "labels.png")))
    assert stats is not None and sorted(path.name for path in tmp_path.iterdir()) == ["labels.png", "set"]


def test_label_stats_of_20000_classes_draw_the_classes_present(tmp_path: Path) -> None:
    """One bar per class with boxes: 20,000 bars took 74 s and 210 MB to draw, for three classes with boxes."""
    records = [ImageRecord(Path(f"{index}.jpg"), index, 100, 100, np.array([index % 3]),
                           np.array([[0.5, 0.5, 0.2, 0.2]], np.float32), np.array([False])) for index in range(4)]
    tracemalloc.start()
    try:
        path = plot_label_stats(records, [f"class{index}" for index in range(20_000)], tmp_path / "labels.png")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert cv2.imread(str(path)) is not None and peak < 100 * 2**20
