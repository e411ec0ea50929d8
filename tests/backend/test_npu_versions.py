"""torch_npu and CANN come in pairs: the installed CANN's version read from its toolkit's install record, the pair
checked against Ascend/pytorch's COMPATIBILITY table (kept as data and in docs/torch-npu.md), the fix named in one line;
the kernel lists of each torch_npu release pyproject.toml's npu extra pins, and which one doctor describes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from detect import doctor
from detect.backend import environment
from detect.backend.npu_ops import list_versions, lists_for, npu_kernels
from detect.backend.npu_ops.versions import cann_order, check_pair, compatibility, read_cann_version
from tests.npu_standin import install, write_cann_toolkit

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def clean_environment(monkeypatch):
    for name in [*environment.VARIABLES, "ASCEND_OPP_PATH"]:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("torch_npu", "cann", "status", "fix"), [
    ("2.9.0", "8.5.0", "OK", ""),
    ("2.9.0.post6", "9.1.0", "OK", ""),
    # the pair: CANN 8.5.0 stops at torch_npu 2.9.0
    ("2.14.0", "8.5.0", "FAIL", ("pip install torch-npu==2.9.0 torch==2.9.0 or install CANN 9.1.0 or newer for "
                                 "torch_npu 2.14.0")),
    ("2.12.0", "8.5.0", "FAIL", "pip install torch-npu==2.9.0 torch==2.9.0 or install CANN 9.1.0 for torch_npu 2.12.0"),
    ("2.9.0", "8.3.RC1", "FAIL", "install CANN 8.5.0 for torch_npu 2.9.0"),
    # newer than the table (its snapshot knows torch_npu up to 2.12.0 and CANN up to 9.1.0): unverified, not wrong
    ("2.14.0", "9.1.0", "WARN", "unverified pair; a pair of the table: pip install torch-npu==2.9.0.post6 torch==2.9.0"),
    ("2.14.0", "9.2.0", "WARN", "unverified pair: install CANN 9.1.0 or newer for torch_npu 2.14.0"),
])
def test_a_pair_is_checked_against_the_table_with_the_fix_in_one_line(torch_npu, cann, status, fix):
    check = check_pair(torch_npu, cann)
    assert (check.status, check.hint) == (status, fix)
    assert "\n" not in check.detail + check.hint


def test_cann_versions_sort_as_releases():
    assert cann_order("8.3.RC1") < cann_order("8.3.0") < cann_order("8.5.0") < cann_order("9.1.0")
    assert cann_order("9.2.0-beta.2") == cann_order("9.2.0") and cann_order("latest") is None


def test_the_table_in_the_docs_is_the_table_in_the_package():
    text = (REPO / "docs" / "torch-npu.md").read_text()
    section = text.split("\n## Versions\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w.]+)` \| ([\w.]+) \|$", section, re.MULTILINE)
    assert tuple(rows) == compatibility() and len(rows) == 26


@pytest.mark.parametrize("layout", ["ascend-toolkit/latest", "cann"])
def test_the_cann_version_comes_from_the_toolkits_install_record(tmp_path, layout):
    home = write_cann_toolkit(tmp_path / layout, "8.5.0", arch="aarch64")
    (home / "aarch64-linux" / "ascend_ops_install.info").write_text("package_name=Ascend-cann-910b-ops\nversion=1.0\n")
    assert read_cann_version(home) == "8.5.0"  # innerversion= and the ops package's record are not it
    assert read_cann_version(tmp_path) is None


def test_doctor_names_a_bad_pair_and_its_fix(clean_environment, monkeypatch, tmp_path, capsys):
    install(monkeypatch, fallback="run")  # torch_npu 2.14.0
    write_cann_toolkit(tmp_path / "latest", "8.5.0", monkeypatch)
    assert doctor.main([]) == 1
    lines = capsys.readouterr().out.splitlines()
    failed = next(index for index, line in enumerate(lines) if line.split()[:2] == ["FAIL", "torch_npu+CANN"])
    assert "pairs CANN 8.5.0 with torch_npu up to 2.9.0; 2.14.0 is newer" in lines[failed]
    assert lines[failed + 1].split("-> ", 1)[1] == ("pip install torch-npu==2.9.0 torch==2.9.0 or install CANN 9.1.0 or "
                                                    "newer for torch_npu 2.14.0")


def test_the_npu_extra_pins_the_releases_that_have_kernel_lists():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (requirement,) = [Requirement(text) for text in project["optional-dependencies"]["npu"]]
    assert list_versions() == ["2.9.0", "2.14.0"]
    for version in ["2.9.0", "2.9.0.post6", "2.14.0"]:
        assert requirement.specifier.contains(version) and lists_for(version).split(".")[:2] == version.split(".")[:2]
    for version in ["2.8.0", "2.10.0.post4", "2.12.0", "2.13.0", "2.15.0"]:
        assert not requirement.specifier.contains(version)


def test_each_pinned_release_has_its_own_lists():
    old, new = npu_kernels("2.9.0"), npu_kernels("2.14.0")
    assert (old.torch_npu_source, new.torch_npu_source) == ("torch_npu 2.9.0", "torch_npu 2.14.0")
    assert old.op_plugin_source.startswith("op-plugin v2.9 (") and new.op_plugin_source.startswith("op-plugin v2.14 (")
    assert "to.dtype" in old.registered - new.registered  # 2.9.0 registers it; 2.14.0 leaves it to torch's composite
    assert old.acl_op_only("npu_nms_v4") and new.acl_op_only("npu_nms_v4")
    assert lists_for(None) == lists_for("2.12.0") == "2.14.0" and lists_for("not a version") == "2.14.0"


def test_doctor_says_which_release_its_lists_describe(clean_environment, monkeypatch, tmp_path, capsys):
    install(monkeypatch, fallback="run").__version__ = "2.12.0"
    write_cann_toolkit(tmp_path / "latest", "9.1.0", monkeypatch)
    doctor.main([])
    lines = capsys.readouterr().out.splitlines()
    listed = next(index for index, line in enumerate(lines) if line.split()[1:4] == ["NPU", "op", "lists"])
    assert lines[listed].split()[0] == "WARN"
    assert lines[listed].endswith("none for torch_npu 2.12.0: python -m detect.doctor --ops describes torch_npu 2.14.0")
