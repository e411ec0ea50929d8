"""prune(model, amount): yolov5's pruning tutorial (global L1 magnitude pruning of the convolutions, made
permanent, sparsity reported), and the pruned model saved and scored as any other."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from detect import val
from detect.models import build_model
from detect.models.prune import prune, sparsity
from detect.models.safe_io import save_checkpoint
from detect.models.weights import load_model, weights_payload
from tests.data.helpers import write_sample, write_yaml


def conv_weights(model: nn.Module) -> torch.Tensor:
    return torch.cat([module.weight.detach().flatten() for module in model.modules() if isinstance(module, nn.Conv2d)])


def test_prune_zeroes_the_smallest_conv_weights_across_layers_and_reports_sparsity(caplog):
    torch.manual_seed(0)
    model = build_model("yolov5n.yaml", num_classes=3)
    before = conv_weights(model).abs()
    keys = set(model.state_dict())
    with caplog.at_level(logging.INFO, logger="detect.models.prune"):
        result = prune(model, amount=0.3)
    after = conv_weights(model)
    assert (after == 0).float().mean().item() == pytest.approx(0.3, abs=1e-4)
    # global: one magnitude threshold for all layers, so the zeros are the smallest weights of the whole model
    assert before[after == 0].max() <= before[after != 0].min()
    assert set(model.state_dict()) == keys and not any(hasattr(m, "weight_mask") for m in model.modules())
    assert result == sparsity(model) == pytest.approx(0.3, abs=0.01)  # with the untrained BatchNorm shifts at 0
    assert caplog.records[-1].getMessage() == f"pruned 0.3 of the Conv2d weights: the model's global sparsity is " \
                                              f"{result:.3g}"
    with pytest.raises(ValueError, match="amount must be a fraction"):
        prune(model, amount=1.5)


def test_the_tutorials_snippet_a_pruned_model_saves_and_scores(tmp_path):
    # yolov5's pruning tutorial: prune(model, 0.3) on the loaded weights, then `val.py --weights ...`
    root = tmp_path / "data"
    for index in range(2):
        write_sample(root, "train", f"im{index}", 96, 128, [(10, 10, 60, 50)])
    torch.manual_seed(0)
    weights = save_checkpoint(tmp_path / "w.pt", weights_payload(build_model("yolov5n.yaml", num_classes=3)))
    model = load_model(weights)
    prune(model, 0.3)
    pruned = save_checkpoint(tmp_path / "pruned.pt", weights_payload(model))
    assert (conv_weights(load_model(pruned)) == 0).float().mean().item() == pytest.approx(0.3, abs=1e-4)
    result = val.run(weights=str(pruned), data=str(write_yaml(root)), imgsz=64, device="cpu", workers=0,
                     project=str(tmp_path / "runs"), progress=False)
    assert result.images == 2
