"""scripts/make_large_dataset.py at small size: COCO's statistics, broken files the check names, deterministic."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import yaml

from tests.scripts.modules import script


def _digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file():
            digest.update(f"{path.relative_to(root)}|".encode() + path.read_bytes())
    return digest.hexdigest()


def test_small_set_has_cocos_statistics_and_a_data_yaml(tmp_path: Path) -> None:
    generator = script("make_large_dataset")
    assert generator.main([str(tmp_path), "--images", "1500", "--val-images", "20", "--workers", "1"]) == 0
    config = yaml.safe_load((tmp_path / "data.yaml").read_text())
    assert len(config["names"]) == 80 and config["names"][0] == "person" and config["names"][79] == "toothbrush"
    images = sorted((tmp_path / "images" / "train").glob("*.jpg"))
    labels = sorted((tmp_path / "labels" / "train").glob("*.txt"))
    assert len(images) == 1500 and len(list((tmp_path / "images" / "val").glob("*.jpg"))) == 20
    rows = [line.split() for label in labels for line in label.read_text().splitlines()]
    assert 6.8 < len(rows) / len(labels) < 7.8  # COCO: 7.3 boxes per image
    assert 0.003 < 1 - len(labels) / len(images) < 0.02  # background images: ~1%
    classes = np.array([int(row[0]) for row in rows if len(row) == 5])
    assert 0.2 < (classes == 0).mean() < 0.4  # person, as in COCO
    sides = [Path(image).stat().st_size for image in images]
    assert max(sides) < 40_000


def test_the_same_seed_gives_the_same_files_for_any_worker_count(tmp_path: Path) -> None:
    generator = script("make_large_dataset")
    generator.make_dataset(tmp_path / "one", 120, 5, workers=1, seed=7)
    generator.make_dataset(tmp_path / "two", 120, 5, workers=2, seed=7)
    (tmp_path / "one" / "data.yaml").unlink()
    (tmp_path / "two" / "data.yaml").unlink()
    assert _digest(tmp_path / "one") == _digest(tmp_path / "two")


def test_bad_arguments_are_one_line(tmp_path: Path, capsys) -> None:
    assert script("make_large_dataset").main([str(tmp_path), "--images", "0"]) == 2
    assert "error:" in capsys.readouterr().err
