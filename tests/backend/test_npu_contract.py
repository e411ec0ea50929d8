"""NPU backend: contract tests of our glue against a CPU stand-in, not the hardware.

The stand-in (tests/npu_standin.py) enforces the documented torch_npu 2.14.0 contracts from docs/torch-npu.md: 0-D
threshold tensors, float32 inputs, int32 padded outputs, bool-only HF32 flags, bf16 queried after set_device.
Our own rule, candidate counts padded to a multiple of 1024, is checked here, not by the stand-in. Passing
here shows detect.backend.npu calls torch_npu as documented; it says nothing about speed or accuracy on a 910B.
"""

import pytest
import torch
import torchvision

from detect.backend import BackendUnavailable
from detect.backend.npu import NMS_BUCKET, NMS_SCORE_FLOOR
from tests.npu_standin import GradScaler, call_names, host, install, make_torch_npu, npu_backend

SCALER = {"init_scale": 512.0, "growth_factor": 4.0, "growth_interval": 9}


def random_candidates(count, seed):
    generator = torch.Generator().manual_seed(seed)
    xy = torch.rand(count, 2, generator=generator) * 600
    boxes = torch.cat([xy, xy + 5 + torch.rand(count, 2, generator=generator) * 200], 1)
    scores = 0.001 + torch.rand(count, generator=generator) * 0.999  # confidence-filtered, like YOLOv5 val
    return boxes, scores


@pytest.mark.parametrize("count", [1, 2, 37, 1023, 1024, 1025, 3000])
@pytest.mark.parametrize("iou_threshold", [0.45, 0.7])
def test_nms_matches_torchvision(monkeypatch, count, iou_threshold):
    backend = npu_backend(monkeypatch)
    boxes, scores = random_candidates(count, seed=count)
    keep = backend.nms(boxes, scores, iou_threshold)
    assert keep.dtype == torch.int64 and keep.device == boxes.device
    with host():  # the reference
        assert torch.equal(keep, torchvision.ops.nms(boxes, scores, iou_threshold))
    bucket = -(-count // NMS_BUCKET) * NMS_BUCKET
    assert [c for c in backend.torch_npu.calls if c[0] == "npu_nms_v4"] == [
        ("npu_nms_v4", (bucket, bucket), {"pad_to_max_output_size": True})
    ]


def test_nms_half_precision_inputs(monkeypatch):
    boxes, scores = random_candidates(200, seed=5)
    keep = npu_backend(monkeypatch).nms(boxes.half(), scores.half(), 0.5)
    with host():  # the reference
        assert torch.equal(keep, torchvision.ops.nms(boxes.half().float(), scores.half().float(), 0.5))


def test_nms_empty_input_launches_nothing(monkeypatch):
    backend = npu_backend(monkeypatch)
    keep = backend.nms(torch.zeros(0, 4), torch.zeros(0), 0.5)
    assert keep.shape == (0,) and keep.dtype == torch.int64
    assert "npu_nms_v4" not in call_names(backend.torch_npu)


def test_nms_all_suppressed_but_one(monkeypatch):
    boxes = torch.tensor([[0.0, 0, 100, 100]]).repeat(5, 1)
    scores = torch.tensor([0.2, 0.9, 0.5, 0.3, 0.1])
    assert npu_backend(monkeypatch).nms(boxes, scores, 0.5).tolist() == [1]


def test_score_floor_is_tiny_and_positive():
    assert 0 < NMS_SCORE_FLOOR < 1e-3


def test_standin_enforces_the_contract():
    fake = make_torch_npu()
    boxes, scores = torch.rand(1024, 4), torch.rand(1024)
    iou, floor = torch.tensor(0.5), torch.tensor(1e-6)
    with pytest.raises(AssertionError, match="0-D"):
        fake.npu_nms_v4(boxes, scores, 1024, 0.5, floor)
    with pytest.raises(AssertionError, match="float32"):
        fake.npu_nms_v4(boxes.half(), scores.half(), 1024, iou, floor)
    selected, valid = fake.npu_nms_v4(boxes, scores, 1024, iou, floor, pad_to_max_output_size=True)
    assert selected.dtype == torch.int32 and selected.shape == (1024,)
    assert valid.dtype == torch.int32 and valid.dim() == 0


def test_standin_is_no_stricter_than_torch_npu():
    # 1000 candidates: the 1024 bucket is our rule, and torch_npu accepts any count
    # (docs/torch-npu.md, "NMS on the NPU").
    selected, valid = make_torch_npu().npu_nms_v4(torch.rand(1000, 4), torch.rand(1000), 1000, torch.tensor(0.5),
                                                  torch.tensor(1e-6), pad_to_max_output_size=True)
    assert selected.shape == (1000,) and 0 < int(valid) <= 1000


def test_standin_follows_the_real_classes():
    fake = make_torch_npu()
    scaler = fake.npu.amp.GradScaler(dynamic=False)
    assert scaler._dynamic is False and not hasattr(scaler, "dynamic")  # torch_npu keeps only `_dynamic`
    for flag in (fake.npu.conv, fake.npu.matmul):
        with pytest.raises(TypeError, match="bool"):
            flag.allow_hf32 = 1
    with pytest.raises(AssertionError, match="before set_device"):
        fake.npu.is_bf16_supported()


def test_compile_mode_and_hf32_untouched_by_default(monkeypatch):
    fake = npu_backend(monkeypatch).torch_npu
    assert "set_compile_mode" not in call_names(fake)
    assert fake.npu.conv.allow_hf32 is True and fake.npu.matmul.allow_hf32 is False


@pytest.mark.parametrize("jit_compile", [True, False])
def test_compile_mode_set_when_asked(monkeypatch, jit_compile):
    fake = npu_backend(monkeypatch, jit_compile=jit_compile).torch_npu
    assert ("set_compile_mode", (), {"jit_compile": jit_compile}) in fake.calls


@pytest.mark.parametrize("allow_hf32", [True, False])
def test_hf32_set_when_asked(monkeypatch, allow_hf32):
    fake = npu_backend(monkeypatch, allow_hf32=allow_hf32).torch_npu
    assert fake.npu.conv.allow_hf32 is allow_hf32 and fake.npu.matmul.allow_hf32 is allow_hf32


def test_scaler_comes_from_torch_npu_with_the_settings(monkeypatch):
    backend = npu_backend(monkeypatch)
    assert backend.amp_enabled and backend.amp_dtype == torch.float16
    scaler = backend.grad_scaler(**SCALER)
    assert isinstance(scaler, GradScaler) and scaler.is_enabled() and scaler._dynamic
    assert (scaler.get_scale(), scaler.get_growth_factor(), scaler.get_growth_interval()) == (512.0, 4.0, 9)


@pytest.mark.parametrize("options", [{"amp": False}, {"amp_dtype": "bf16"}])
def test_scaler_is_no_op_without_fp16(monkeypatch, options):
    scaler = npu_backend(monkeypatch, **options).grad_scaler(**SCALER)
    assert not isinstance(scaler, GradScaler) and scaler.is_enabled() is False


def test_bf16_is_checked_after_set_device(monkeypatch):
    backend = npu_backend(monkeypatch, amp_dtype="bf16")
    assert "is_bf16_supported" not in call_names(backend.torch_npu)  # constructing opens no device context
    backend.set_device()
    assert call_names(backend.torch_npu)[-2:] == ["set_device", "is_bf16_supported"]
    assert backend.amp_dtype == torch.bfloat16


def test_bf16_unsupported_is_one_clear_error(monkeypatch):
    fake = install(monkeypatch)
    fake.bf16_supported = False
    from detect.backend.npu import NpuBackend

    backend = NpuBackend(0, device=torch.device("cpu"), amp_dtype="bf16")
    with pytest.raises(BackendUnavailable, match="does not support bf16; use fp16"):
        backend.set_device()


def test_autocast_uses_backend_dtype(monkeypatch):
    backend = npu_backend(monkeypatch)
    a = torch.randn(4, 4)
    with backend.autocast():
        assert (a @ a).dtype == torch.float16


def test_identity_and_device_calls(monkeypatch):
    backend = npu_backend(monkeypatch)
    assert backend.name == "npu" and backend.distributed_backend == "hccl"
    backend.set_device()
    backend.seed(7)
    backend.synchronize()
    backend.reset_peak_memory()
    backend.empty_cache()
    stats = backend.memory_stats()
    assert (stats.current_bytes, stats.peak_bytes) == (1000, 2000)
    fake = backend.torch_npu
    assert ("manual_seed_all", (7,), {}) in fake.calls
    for name in ("set_device", "synchronize", "reset_peak_memory_stats", "empty_cache"):
        assert name in call_names(fake)


def test_resize_same_code_as_cpu(monkeypatch):
    images = torch.rand(1, 3, 30, 40)
    from detect.backend import select

    assert torch.equal(npu_backend(monkeypatch).resize(images, (60, 64)), select("cpu").resize(images, (60, 64)))
