"""`python -m detect.doctor --ops [--cfg ...]`: every op of each phase of training and validation of a model yaml and
where torch_npu 2.14 runs it on a 910B, recorded on the host; for yolov5s and each of yolov5's 23 model yamls every op
has an NPU kernel or is a torch composite or view whose ops have one."""

from __future__ import annotations

import pytest
import torch
import yaml

from detect import doctor
from detect.backend.npu_ops import kernels
from detect.doctor import ops
from detect.doctor.phases import record_phases
from detect.models import build_model
from detect.training import step
from tests.models.yolov5_yamls import all_yamls

PHASES = ["copy to the device, resize (--multi-scale)", "forward (train mode, autocast)", "loss with target assignment",
          "backward (scaled loss)", "GradScaler unscale_", "gradient clipping (clip_grad_norm_)",
          "SGD step (GradScaler step)", "GradScaler update", "zero the gradients", "EMA update",
          "Adam step (GradScaler step)", "AdamW step (GradScaler step)", "validation forward and decode", "NMS",
          "the step's all-reduce of its flags", "DDP backward (gradient buckets, all-reduce)"]


def op_line(lines: list[str], op: str, after: str) -> str:
    """The line of `op` in the phase titled `after`."""
    start = lines.index(next(line for line in lines if line.startswith(f"{after}: ")))
    return next(line for line in lines[start + 1:] if line.split()[1:2] == [op])


def test_yolov5s_every_op_of_every_phase_runs_on_the_npu(capsys):
    assert doctor.main(["--ops", "--cfg", "yolov5s.yaml"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ops of yolov5s.yaml on an Ascend NPU with torch_npu 2.14.0 (recorded on the host: 64 px")
    assert [line.split(": ")[0] for line in lines if not line.startswith(" ")][1:-1] == PHASES
    assert lines[-1].startswith("verdict: all ") and lines[-1].endswith(f"ops of {len(PHASES)} phases run on the NPU "
                                                                        "(NPU kernels, or torch composites and views "
                                                                        "whose ops have NPU kernels)")
    convolution = op_line(lines, "aten::convolution", "forward (train mode, autocast)")
    assert convolution.split()[0] == "NPU" and "op-plugin v2.14" in convolution and "model.6 (C3)" in convolution
    assert "model.9 (SPPF)" in op_line(lines, "aten::max_pool2d_with_indices", "forward (train mode, autocast)")
    assert "model.24 (Detect)" in op_line(lines, "aten::permute", "forward (train mode, autocast)")
    assert "op-plugin v2.14 (517f2e7d0f20) acl_op " in op_line(lines, "npu::npu_nms_v4", "NMS")  # acl_op only
    assert op_line(lines, "aten::nonzero", "NMS").split()[0] == "NPU"
    assert "PrivateUse1 kernel" in op_line(lines, "c10d::allreduce_", "DDP backward (gradient buckets, all-reduce)")
    assert op_line(lines, "aten::_foreach_mul_.Tensor", "gradient clipping (clip_grad_norm_)").split()[0] == "COMP"
    assert not any(line.split()[:1] in (["CPU"], ["HOST"]) for line in lines)
    assert not [line for line in lines if "torchvision::" in line]


def test_the_training_phases_are_the_steps_own_and_a_change_to_its_order_is_recorded(monkeypatch):
    def training_phases() -> list[str]:
        phases = record_phases(build_model("yolov5n.yaml"), batch_size=1, optimizers=("SGD",), validation=False,
                               ddp=False, layers=False)
        return [phase.name for phase in phases]

    def optimizer_step() -> list[str]:
        return [name.format(optimizer="SGD") for name, _ in step.OPTIMIZER_STEP]

    assert training_phases() == PHASES[:4] + optimizer_step() == PHASES[:10]
    # the EMA averaged before the scaler's update, and the gradients kept (a step in another order): what the
    # doctor records follows the step, not a copy of it
    reordered = tuple(phase for phase in step.OPTIMIZER_STEP if phase[0] != "zero the gradients")
    reordered = (*reordered[:3], reordered[-1], *reordered[3:-1])
    monkeypatch.setattr(step, "OPTIMIZER_STEP", reordered)
    recorded = training_phases()
    assert recorded == PHASES[:4] + optimizer_step() and recorded[-2:] == ["EMA update", "GradScaler update"]


def test_an_op_that_would_fall_back_to_the_cpu_is_named_with_its_layer(monkeypatch, capsys):
    def with_logit(cfg):  # on purpose: a head whose outputs go through torch.logit (a kernel that runs on the CPU)
        model = build_model(cfg)
        model.detect.register_forward_hook(lambda module, inputs, outputs: [torch.logit(o.sigmoid()) for o in outputs])
        return model

    monkeypatch.setattr(ops, "build_model", with_logit)
    assert doctor.main(["--ops", "--cfg", "yolov5n.yaml"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert op_line(lines, "aten::logit", "forward (train mode, autocast)").split()[0] == "HOST"
    assert lines[-1].startswith("verdict: NOT ON THE NPU: 2 op(s) would run on the CPU (torch-npu's fallback): "
                                "aten::logit (forward (train mode, autocast): model.24 (Detect)); aten::logit_backward")


def test_a_yaml_that_cannot_be_built_is_one_line(tmp_path, capsys):
    broken = tmp_path / "broken.yaml"
    spec = all_yamls()["yolov5n"]
    spec["head"][2][0] = [-1, 2]  # a Concat of maps of different sizes: the build's forward fails
    broken.write_text(yaml.safe_dump(spec))
    assert doctor.main(["--ops", "--cfg", str(broken)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: {broken} cannot be built: RuntimeError: ") and "\n" not in error
    assert doctor.main(["--ops", "--cfg", str(tmp_path / "absent.yaml")]) == 2
    assert "absent.yaml" in capsys.readouterr().err


def test_cfg_without_ops_is_refused(capsys):
    assert doctor.main(["--cfg", "yolov5s.yaml"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --cfg and --npu-release go with --ops (the model whose ops to list, "
                                               "the lists to read)")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(all_yamls()))
def test_each_yolov5_yaml_trains_and_validates_on_npu_kernels(tmp_path, name):
    # Small (the ops depend on the layers, not their widths): depth 0.33, width 0.125, as tests/training does.
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**all_yamls()[name], "depth_multiple": 0.33, "width_multiple": 0.125}))
    phases = record_phases(build_model(str(path)), batch_size=1, optimizers=("SGD",), ddp=False, layers=False)
    assert [phase.name for phase in phases][:4] == PHASES[:4] and phases[-1].name == "NMS"
    assert not [(phase.name, use.op) for phase in phases for use in phase.uncovered]
    assert any(use.op == "npu::npu_nms_v4" for use in phases[-1].ops.values())


def test_the_lists_of_another_release_are_named(monkeypatch, capsys):
    monkeypatch.setattr(kernels, "installed_version", lambda: "2.12.0")  # a release without lists of its own
    doctor.main(["--ops", "--cfg", "yolov5n.yaml"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "torch_npu 2.12.0 is installed; these lists describe torch_npu 2.14.0"
    assert lines[1].startswith("ops of yolov5n.yaml on an Ascend NPU with torch_npu 2.14.0 ")
    monkeypatch.setattr(kernels, "installed_version", lambda: None)
    doctor.main(["--ops", "--cfg", "yolov5n.yaml", "--npu-release", "2.9"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ops of yolov5n.yaml on an Ascend NPU with torch_npu 2.9.0 (")
    assert "op-plugin v2.9 (517f2e7d0f20)" in op_line(lines, "npu::npu_nms_v4", "NMS")


def test_torch_npu_2_9_lacks_the_losss_scatter_reduce(monkeypatch, capsys):
    """What the 2.9.0 lists show (docs/torch-npu.md, "Versions"): the loss's scatter_reduce amax has no NPU kernel in
    that wheel, so it would run on the CPU; 2.14.0 has one."""
    monkeypatch.setattr(kernels, "installed_version", lambda: None)
    assert doctor.main(["--ops", "--cfg", "yolov5n.yaml", "--npu-release", "2.9"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == ("verdict: NOT ON THE NPU: 1 op(s) would run on the CPU (torch-npu's fallback): "
                         "aten::scatter_reduce.two_out (loss with target assignment: DetectionLoss)")
