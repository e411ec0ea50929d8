"""The Detect head's decode and bias initialisation against the formulas of
docs/yolov5.md ("Architecture", "Decode")."""

import math
import tracemalloc

import pytest
import torch

from detect.errors import UserError
from detect.models import build_model
from detect.models.head import MAX_CLASSES, Detect

ANCHORS = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119]]


def make_head(num_classes: int = 2) -> Detect:
    head = Detect(num_classes, ANCHORS, in_channels=[4, 4])
    head.set_strides(torch.tensor([8.0, 16.0]))
    return head


def test_decode_of_a_hand_made_raw_tensor():
    head = make_head()
    raw = torch.zeros(1, 3, 2, 3, 7)  # level 0: 2 rows, 3 columns
    raw[0, 1, 1, 2] = torch.tensor([0.0, math.log(3), 0.0, math.log(1 / 3), 2.0, -1.0, 0.5])
    decoded = head.decode_level(raw, level=0).view(1, 3, 2, 3, 7)
    s = torch.sigmoid(torch.tensor([0.0, math.log(3), 0.0, math.log(1 / 3), 2.0, -1.0, 0.5]))
    # anchor 1 of P3 is (16, 30) pixels; the cell is column 2, row 1; stride 8
    expected = torch.tensor([(2 * s[0] - 0.5 + 2) * 8, (2 * s[1] - 0.5 + 1) * 8,
                             (2 * s[2]) ** 2 * 16, (2 * s[3]) ** 2 * 30, s[4], s[5], s[6]])
    torch.testing.assert_close(decoded[0, 1, 1, 2], expected)
    # all-zero raw: centre of its cell, 1x the anchor, score 0.5
    torch.testing.assert_close(decoded[0, 2, 0, 1], torch.tensor([12.0, 4.0, 33.0, 23.0, 0.5, 0.5, 0.5]))


def test_anchors_are_stored_in_grid_units():
    head = make_head()
    torch.testing.assert_close(head.anchors[1, 0], torch.tensor([30 / 16, 61 / 16]))


def test_bias_initialisation():
    head = make_head(num_classes=2)
    before = [conv.bias.detach().clone().view(3, 7) for conv in head.m]
    head.initialize_biases()
    for conv, start, stride in zip(head.m, before, (8, 16)):
        delta = conv.bias.detach().view(3, 7) - start
        torch.testing.assert_close(delta[:, 4], torch.full((3,), math.log(8 / (640 / stride) ** 2)))
        torch.testing.assert_close(delta[:, 5:], torch.full((3, 2), math.log(0.6 / (2 - 0.99))))
        torch.testing.assert_close(delta[:, :4], torch.zeros(3, 4))


def test_decode_reads_permuted_views_and_concatenates_levels_in_order():
    head = make_head()
    features = [torch.randn(2, 4, 4, 6), torch.randn(2, 4, 2, 3)]
    views = head.levels(features)
    assert not views[0].is_contiguous()  # the fast path decodes without copying the conv output first
    raw = head(features)
    assert [tuple(r.shape) for r in raw] == [(2, 3, 4, 6, 7), (2, 3, 2, 3, 7)]
    expected = torch.cat([head.decode_level(raw[0], 0), head.decode_level(raw[1], 1)], dim=1)
    torch.testing.assert_close(head.decode(views), expected)  # with gradients: the graph form
    with torch.no_grad():  # at inference: decoded in place in one result, the same numbers
        torch.testing.assert_close(head.decode(views), expected, rtol=1e-6, atol=1e-6)
        assert head.decode(views).shape == (2, 3 * (24 + 6), 7)
        traced = torch.jit.trace(lambda *levels: head.decode(list(levels)), tuple(views))
    assert "aten::cat" in str(traced.graph)  # what exports trace: the graph form


def test_more_classes_than_the_bound_are_refused_before_the_head_is_built():
    """yolov5n with a million classes: 5 GB of head weights, refused in one line without allocating them."""
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match=rf"^1,000,000 classes: more than the {MAX_CLASSES:,} a model may predict "
                                            r"\(its Detect head alone would hold 1,344,006,720 weights: 5.0 GB in "
                                            r"float32, 20.0 GB to train with their gradients, EMA and momentum\)$"):
            build_model("yolov5n.yaml", num_classes=1_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**28
