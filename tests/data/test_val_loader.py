"""Validation: rectangular batch shapes (docs/yolov5.md, "Rect batches"), letterbox, and the exact way back to original
pixels."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from detect.data import ValLoaderSettings, boxes_to_original, build_val_loader, load_data_config, load_split
from detect.data.images.letterbox import LetterboxInfo, rect_batch_shapes
from tests.data.helpers import white_extent, write_sample, write_yaml

# (height, width) of originals: wide, tall, square, and sizes whose load resize rounds up (ceil)
SIZES = [(100, 150), (375, 500), (500, 333), (427, 640), (64, 64), (300, 200), (333, 500), (90, 300)]


def _dataset(root: Path) -> Path:
    for index, (height, width) in enumerate(SIZES):
        box = (width // 10, height // 8, width // 2, height // 2)
        write_sample(root, "train", f"{index:03d}", height, width,
                     [box, (width // 2, height // 2, width - 3, height - 2)])
    return write_yaml(root)


def test_rect_batch_shapes_follow_the_formula() -> None:
    heights = np.array([480.0, 480, 640, 640, 500, 300])
    widths = np.array([640.0, 640, 480, 480, 500, 400])
    order, shapes = rect_batch_shapes(heights, widths, batch_size=2, imgsz=640)
    assert list(np.array(heights / widths)[order]) == sorted(heights / widths)
    # all wide (h/w 0.75): [0.75, 1] -> ceil(15 + 0.5)*32 = 512, ceil(20 + 0.5)*32 = 672
    assert shapes.tolist() == [[512, 672], [672, 672], [672, 512]]


def test_val_batches_are_rect_and_map_back_to_the_original(tmp_path: Path) -> None:
    config = load_data_config(_dataset(tmp_path))
    loader = build_val_loader(load_split(config, "val"), ValLoaderSettings(160, 3, 0, pin_memory=False))
    seen_aspects, checked = [], 0
    for batch in loader:
        height, width = batch.images.shape[2:]
        assert height % 32 == 0 and width % 32 == 0 and batch.images.dtype == torch.uint8
        assert int(batch.target_counts.sum()) == len(batch.targets)
        for index, info in enumerate(batch.letterbox):
            original_height, original_width = info.original
            seen_aspects.append(original_height / original_width)
            ratio = 160 / max(info.original)
            loaded_height, loaded_width = math.ceil(original_height * ratio), math.ceil(original_width * ratio)
            assert info.gain == loaded_height / original_height  # yolov5's gain: loaded h / original h
            rows = batch.targets[batch.targets[:, 0] == index, 2:]
            assert torch.equal(batch.padded_targets[index, :len(rows), 1:], rows)
            assert (batch.padded_targets[index, len(rows):, 0] == -1).all()
            xyxy = torch.cat([rows[:, :2] - rows[:, 2:] / 2, rows[:, :2] + rows[:, 2:] / 2], 1) * torch.tensor(
                [width, height, width, height])
            union = [*xyxy[:, :2].min(0).values.tolist(), *xyxy[:, 2:].max(0).values.tolist()]
            drawn = white_extent(batch.images[index].numpy().transpose(1, 2, 0))
            np.testing.assert_allclose(drawn, union, atol=1.0)  # the pixels are where the targets say
            back = boxes_to_original(xyxy, info)
            record = next(r for r in loader.split.records if str(r.path) == batch.paths[index])
            scale = torch.tensor([original_width, original_height] * 2)
            expected = torch.cat([torch.from_numpy(record.boxes[:, :2] - record.boxes[:, 2:] / 2),
                                  torch.from_numpy(record.boxes[:, :2] + record.boxes[:, 2:] / 2)], 1) * scale
            # exact on y; on x exact up to the load step's ceil, which yolov5's single gain (h/h0) keeps
            torch.testing.assert_close(back[:, 1::2], expected[:, 1::2], atol=1e-3, rtol=0)
            x_error = original_width * abs(loaded_width / original_width - info.gain) / info.gain
            torch.testing.assert_close(back[:, 0::2], expected[:, 0::2], atol=x_error + 1e-3, rtol=0)
            checked += 1
    assert checked == len(SIZES) and seen_aspects == sorted(seen_aspects)


def test_boxes_to_original_subtracts_pad_divides_gain_and_clips() -> None:
    info = LetterboxInfo(original=(100, 200), gain=0.5, pad=(3.5, 10.0))
    boxes = torch.tensor([[3.5, 10.0, 53.5, 35.0], [0.0, 0.0, 200.0, 200.0]])
    expected = torch.tensor([[0.0, 0.0, 100.0, 50.0], [0.0, 0.0, 200.0, 100.0]])
    torch.testing.assert_close(boxes_to_original(boxes, info), expected)
    assert boxes[0, 0] == 3.5  # the input is not changed


def test_val_loader_gives_every_image_once_whole_or_in_shards(tmp_path: Path) -> None:
    config = load_data_config(_dataset(tmp_path))
    loader = build_val_loader(load_split(config, "val"), ValLoaderSettings(128, 3, 0, pin_memory=False))
    whole = [(tuple(batch.paths), tuple(batch.images.shape)) for batch in loader]
    paths = [path for batch_paths, _ in whole for path in batch_paths]
    assert len(paths) == len(set(paths)) == len(SIZES)
    # Two ranks: rank r takes whole batches r, r + 2, ... with the paths and shapes of the one-process batches, so the
    # main rank can gather and score every image once (evaluation/val_loop.py merge_shards).
    split = load_split(config, "val")
    shards = [[(tuple(batch.paths), tuple(batch.images.shape)) for batch in
               build_val_loader(split, ValLoaderSettings(128, 3, 0, pin_memory=False, rank=rank, world_size=2))]
              for rank in (0, 1)]
    assert shards == [whole[0::2], whole[1::2]]
