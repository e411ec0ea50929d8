"""The built-in shapes dataset: deterministic, labels on the drawn shapes, and loadable through its yaml."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from detect.data import builtin, load_data_config, load_split


def test_generation_is_deterministic_and_labels_cover_shapes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(builtin, "SPLIT_SIZES", {"train": 6, "val": 2})
    builtin.generate_shapes(tmp_path / "one")
    builtin.generate_shapes(tmp_path / "two")
    for path in sorted((tmp_path / "one").rglob("*.*")):
        assert path.read_bytes() == (tmp_path / "two" / path.relative_to(tmp_path / "one")).read_bytes()
    label_lines = (tmp_path / "one" / "labels" / "train" / "000000.txt").read_text().split("\n")
    fewest, past_most = builtin.SHAPES_PER_IMAGE
    assert fewest <= len([line for line in label_lines if line]) < past_most
    image = cv2.imread(str(tmp_path / "one" / "images" / "train" / "000000.jpg"))
    assert image is not None and image.std() > 10  # cluttered, not flat


def test_bundled_yaml_generates_on_first_use() -> None:
    config = load_data_config("shapes")
    split = load_split(config, "train")
    assert len(split.records) == builtin.SPLIT_SIZES["train"] and split.names == list(builtin.SHAPE_NAMES)
    classes = np.concatenate([record.classes for record in split.records])
    assert set(classes.tolist()) == set(range(len(builtin.SHAPE_NAMES)))
    assert (config.root / "VERSION").read_text().strip() == builtin.GENERATOR_VERSION
