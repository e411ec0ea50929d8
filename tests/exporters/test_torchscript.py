"""The TorchScript exporter: the traced model equals the eager one; --no-fuse keeps BatchNorm."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.exporters.helpers import IMGSZ, eager, run_export

# torch 2.14 marks torch.jit.load deprecated; loading the TorchScript file is what these tests check.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")


def test_torchscript_equals_eager(weights, static_exports):
    traced = torch.jit.load(str(static_exports["torchscript"]))
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        np.testing.assert_allclose(traced(images).numpy(), eager(weights, images), rtol=0, atol=1e-4)


def test_no_fuse_keeps_batchnorm_in_the_torchscript_graph(weights, static_exports, tmp_path):
    unfused = torch.jit.load(str(run_export(weights, tmp_path, "--no-fuse")["torchscript"]))
    fused = torch.jit.load(str(static_exports["torchscript"]))
    assert "batch_norm" in str(unfused.inlined_graph) and "batch_norm" not in str(fused.inlined_graph)
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        np.testing.assert_allclose(unfused(images).numpy(), eager(weights, images), rtol=0, atol=1e-4)
