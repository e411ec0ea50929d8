"""NMS on the host (`--nms-device cpu`) for val, predict, serve and training's validation; ACL_OP_INIT_MODE=2 (torch_npu's
acl ops off, so npu_nms_v4, an acl_op only, fails "Acl op is disabled!") named in one line at the first NMS and in
doctor; `python -m detect.doctor --nms` comparing the device's NMS with the host's on a real batch. On the NPU
stand-in (tests/npu_standin.py), which refuses an acl_op-only op in mode 2 as torch_npu 2.14 does."""

from __future__ import annotations

import pytest
import torch

from detect import backend as backends
from detect import doctor, predict, val
from detect.backend import environment, npu
from detect.errors import UserError
from detect.inference.predictor import Predictor
from detect.serve.settings import ServeSettings
from detect.training.settings import TrainSettings, resume_fields
from tests.npu_standin import call_names, install, npu_backend
from tests.training.helpers import tiny_dataset


def rows(count: int = 60) -> torch.Tensor:
    """(1, count, 8) decoded rows of 3 classes: clusters of overlapping boxes, scores above validation's threshold."""
    torch.manual_seed(0)
    centres = torch.rand(count, 2) * 200 + 20
    return torch.cat([centres, torch.full((count, 2), 30.0) + torch.rand(count, 2) * 10, torch.rand(count, 1) * 0.9
                      + 0.05, torch.rand(count, 3)], dim=1)[None]


def test_every_command_takes_the_switch():
    assert val.parse_args(["--nms-device", "cpu"]).nms_device == "cpu"
    assert predict.parse_args(["--nms-device", "cpu"]).detector_settings().nms_device == "cpu"
    assert ServeSettings(weights="w.pt", nms_device="cpu").predict_settings().nms_device == "cpu"
    assert TrainSettings(nms_device="cpu").nms_device == "cpu" and "nms_device" in resume_fields()
    with pytest.raises(SystemExit):
        val.parse_args(["--nms-device", "npu"])
    with pytest.raises(UserError, match="--nms-device gpu: expected one of device, cpu"):
        backends.select("cpu", nms_device="gpu")


def test_nms_on_the_host_keeps_what_the_device_keeps_without_its_kernel(monkeypatch):
    # The stand-in's tensors are all on the CPU: it takes the host's torchvision::nms for an NPU op without a kernel,
    # so it warns here instead of refusing (tests/npu_standin.py).
    backend = npu_backend(monkeypatch, fallback="warn")
    predictor, output = Predictor(lambda images: images), rows()
    on_device = predictor.detections(output, backend, conf_threshold=0.001, iou_threshold=0.6, max_det=300)
    assert call_names(backend.torch_npu).count("npu_nms_v4") == 1
    backend.nms_on_host = True
    on_host = predictor.detections(output, backend, conf_threshold=0.001, iou_threshold=0.6, max_det=300)
    assert call_names(backend.torch_npu).count("npu_nms_v4") == 1  # no second call
    assert on_host[0].device.type == "cpu" and torch.equal(on_host[0], on_device[0]) and len(on_host[0]) > 3


def test_acl_ops_turned_off_are_named_at_the_first_nms(monkeypatch):
    monkeypatch.setenv("ACL_OP_INIT_MODE", "2")
    backend = npu_backend(monkeypatch, fallback="warn")  # the host NMS's torchvision::nms (as above)
    predictor = Predictor(lambda images: images)
    with pytest.raises(UserError) as caught:
        predictor.detections(rows(), backend, conf_threshold=0.001, iou_threshold=0.6, max_det=300)
    assert str(caught.value) == ("NMS on the NPU (npu_nms_v4) needs torch_npu's acl ops, which ACL_OP_INIT_MODE=2 turns "
                                 "off: unset it or set it to 0 or 1, or run NMS on the host: --nms-device cpu")
    backend.nms_on_host = True
    assert len(predictor.detections(rows(), backend, conf_threshold=0.001, iou_threshold=0.6, max_det=300)[0]) > 3
    with pytest.raises(UserError, match="^--npu-jit-compile needs torch_npu's acl ops, which ACL_OP_INIT_MODE=2"):
        npu.NpuBackend(0, device=torch.device("cpu"), torch_npu=backend.torch_npu, jit_compile=True)


@pytest.mark.parametrize(("value", "status"), [("2", "WARN"), ("7", "WARN"), ("1", "INFO"), ("0", "INFO")])
def test_doctor_reads_acl_op_init_mode(value, status):
    (check,) = environment.environment_checks({"ACL_OP_INIT_MODE": value})
    assert check.status == status
    if value == "2":
        assert "npu_nms_v4, an acl_op only" in check.hint and "--nms-device cpu" in check.hint


@pytest.fixture
def on_the_standin(monkeypatch):
    """`--device npu:0` is the NPU stand-in, its tensors on the CPU (ops checked, warning as torch_npu does)."""
    module = install(monkeypatch, fallback="warn")
    original = npu.NpuBackend.__init__
    monkeypatch.setattr(npu.NpuBackend, "__init__",
                        lambda self, index=0, **options: original(self, index, device=torch.device("cpu"), **options))
    return module


def doctor_nms(weights, data, capsys) -> tuple[int, list[str]]:
    code = doctor.main(["--nms", "--weights", str(weights), "--data", str(data), "--imgsz", "64", "--batch-size", "4",
                        "--device", "npu:0"])
    return code, capsys.readouterr().out.splitlines()


def test_doctor_compares_the_devices_nms_with_the_hosts(on_the_standin, weights, tmp_path, capsys):
    data = tiny_dataset(tmp_path / "data")
    code, lines = doctor_nms(weights, data, capsys)
    assert code == 0, lines
    assert lines[0].startswith(f"NMS of one validation batch (4 images of {data}, 64 px, {weights}; conf 0.001, IoU "
                               "0.6; median of 5): cpu ")
    kept = int(lines[0].split("detections ")[1].split()[0])
    assert kept > 0 and lines[0].endswith(f"detections {kept} and {kept}, 0 differ")
    assert lines[1].startswith("verdict: use --nms-device ") and "the same detections" in lines[1]


def test_a_device_nms_that_keeps_other_boxes_is_not_chosen(on_the_standin, weights, tmp_path, capsys):
    kernel = on_the_standin.npu_nms_v4

    def one_short(*args, **kwargs):  # a kernel that drops its last kept box
        selected, valid = kernel(*args, **kwargs)
        return selected, torch.clamp(valid - 1, min=0)

    on_the_standin.npu_nms_v4 = one_short
    code, lines = doctor_nms(weights, tiny_dataset(tmp_path / "data"), capsys)
    assert code == 0 and "0 differ" not in lines[0]
    assert lines[1].startswith("verdict: use --nms-device cpu: the device's NMS kept ")


def test_doctor_says_when_the_devices_nms_cannot_run(on_the_standin, weights, tmp_path, capsys):
    on_the_standin.acl_op_init_mode = 2
    code, lines = doctor_nms(weights, tiny_dataset(tmp_path / "data"), capsys)
    assert code == 1
    assert lines == [("NMS on cpu cannot run: NMS on the NPU (npu_nms_v4) needs torch_npu's acl ops, which "
                      "ACL_OP_INIT_MODE (unset: 2 on this chip) turns off: unset it or set it to 0 or 1, or run NMS "
                      "on the host: --nms-device cpu"), "verdict: use --nms-device cpu"]


def test_val_and_predict_suppress_on_the_host_when_asked(on_the_standin, weights, tmp_path):
    data = tiny_dataset(tmp_path / "data")
    common = {"weights": str(weights), "imgsz": 64, "device": "npu:0", "nms_device": "cpu"}
    run = val.run(**common, data=str(data), batch_size=4, workers=0, conf_thres=0.001, project=str(tmp_path / "val"),
                  progress=False)
    saved = predict.run(weights=str(weights), source=str(data.parent / "images" / "train"), imgsz=[64], device="npu:0",
                        nms_device="cpu", conf_thres=0.001, project=str(tmp_path / "predict"))
    assert run.metrics is not None and len(list(saved.glob("*.png"))) == 8
    assert "npu_nms_v4" not in call_names(on_the_standin)  # every NMS ran on the host
    val.run(**{**common, "nms_device": "device"}, data=str(data), batch_size=4, workers=0, conf_thres=0.001,
            project=str(tmp_path / "val"), progress=False)
    assert "npu_nms_v4" in call_names(on_the_standin)  # and the default is the device's
