"""It works from a wheel, from any folder: bundled configs, the built-in data folder, the weights lookup."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import detect
from detect.config import CONFIGS_DIR
from detect.data import load_data_config
from detect.data.builtin import ensure_builtin
from detect.data.data_config import check_sources
from detect.errors import ConfigError, UserError
from detect.models import build_model
from detect.models.weights import resolve_weights
from tests.shared_data import COCO128

REPO = Path(__file__).resolve().parent.parent
PACKAGE = Path(detect.__file__).resolve().parent


def test_bundled_configs_live_inside_the_package():
    assert CONFIGS_DIR.resolve() == PACKAGE / "configs"
    assert Path(build_model("yolov5n.yaml").spec.source).resolve() == PACKAGE / "configs" / "models" / "yolov5n.yaml"
    assert load_data_config("shapes.yaml").source == PACKAGE / "configs" / "data" / "shapes.yaml"


def test_every_bundled_config_is_declared_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["detect"]
    files = [path.relative_to(PACKAGE).as_posix() for path in (PACKAGE / "configs").rglob("*") if path.is_file()]
    assert len(files) >= 10
    assert [name for name in files if not any(fnmatch.fnmatch(name, pattern) for pattern in patterns)] == []


@pytest.fixture
def no_data_dir_settings(monkeypatch):
    monkeypatch.delenv("DETECT_DATA_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)


def test_builtin_data_goes_to_detect_data_dir(no_data_dir_settings, monkeypatch, tmp_path):
    monkeypatch.setenv("DETECT_DATA_DIR", str(tmp_path / "data"))
    config = load_data_config("shapes.yaml")
    assert config.root == tmp_path / "data" / "shapes"
    assert config.splits["train"] == (tmp_path / "data" / "shapes" / "images" / "train",)


def test_builtin_data_goes_to_the_user_cache(no_data_dir_settings, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert load_data_config("shapes.yaml").root == tmp_path / "home" / ".cache" / "detect" / "shapes"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec says to ignore a relative path
    assert load_data_config("shapes.yaml").root == tmp_path / "home" / ".cache" / "detect" / "shapes"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert load_data_config("shapes.yaml").root == tmp_path / "xdg" / "detect" / "shapes"


def test_unwritable_data_dir_is_one_user_error(monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")  # a file in the way stops even root, unlike permissions
    monkeypatch.setenv("DETECT_DATA_DIR", str(blocker / "data"))
    with pytest.raises(UserError, match="set DETECT_DATA_DIR to a writable folder"):
        ensure_builtin(load_data_config("shapes.yaml"))


def test_generation_never_replaces_a_folder_it_did_not_make(tmp_path):
    yaml = tmp_path / "mine.yaml"
    yaml.write_text("path: .\ntrain: images/train\nval: images/val\nbuiltin: shapes\nnames: [a, b, c, d, e]\n")
    with pytest.raises(UserError, match="holds no generated dataset"):
        ensure_builtin(load_data_config(yaml))
    assert yaml.is_file()


def test_bare_weights_name_looks_in_the_working_directory_then_its_weights_folder(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "mine.pt").write_bytes(b"x")
    assert resolve_weights("mine.pt") == Path("weights") / "mine.pt"
    (tmp_path / "mine.pt").write_bytes(b"x")
    assert resolve_weights("mine.pt") == Path("mine.pt")
    with pytest.raises(UserError, match=f"put the file in {tmp_path / 'weights'}"):
        resolve_weights("other.pt")


def test_coco128_yaml_finds_the_data_in_yolov5s_layout(coco128_workdir):
    # ../datasets/coco128 from the working folder, as yolov5's coco128.yaml; a link there is followed to the data
    assert load_data_config("coco128.yaml").root == COCO128.resolve()


def test_coco128_yaml_names_the_missing_folder_where_the_user_should_put_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path / "..")
    data = load_data_config("coco128.yaml")
    expected = tmp_path.parent.parent / "datasets" / "coco128" / "images" / "train2017"  # not inside the package
    with pytest.raises(ConfigError, match=f"'train' names {expected}, which does not exist"):
        check_sources(data, ("train",))


def run(command: list[str | Path], **options) -> str:
    """Run a command to completion; its stdout, or a failure that shows its stderr."""
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=300,
                            check=False, **options)
    assert result.returncode == 0, f"{command}: {result.stderr}"
    return result.stdout


CHECK_INSTALLED = """
import detect
from detect.config import Hyp, load_hyp
from detect.data import load_data_config
print(detect.__file__)
assert load_hyp() == Hyp() and load_hyp("scratch-high").mixup == 0.1
print(load_data_config("shapes.yaml").root)
"""


def test_wheel_runs_from_another_folder(tmp_path):  # about 8 s: offline build, --no-deps install
    # Build from a copy that holds only what a release holds, so nothing outside the package can leak in.
    source = tmp_path / "source"
    shutil.copytree(PACKAGE, source / "detect", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", tmp_path / "dist", source])
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert "detect/configs/models/yolov5s.yaml" in zipfile.ZipFile(wheel).namelist()
    assert {"detect/inference/samples/astronaut.jpg", "detect/inference/samples/README.md"} <= set(
        zipfile.ZipFile(wheel).namelist())

    # A fresh venv that sees this environment's packages through a .pth file: torch is reused, not reinstalled.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip())
    outer = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})
    (site / "outer_packages.pth").write_text("\n".join(outer) + "\n")
    # --ignore-installed: the editable install of this checkout, seen through the .pth, is left alone.
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", wheel])

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["DETECT_DATA_DIR"] = str(tmp_path / "data")
    summary = run([python, "-m", "detect.models", "--cfg", "yolov5s.yaml"], cwd=elsewhere, env=env)
    assert summary.startswith(f"{site / 'detect' / 'configs' / 'models' / 'yolov5s.yaml'}: 181 layers, 7,235,389 ")
    module, data_root = run([python, "-c", CHECK_INSTALLED], cwd=elsewhere, env=env).split()
    assert Path(module) == site / "detect" / "__init__.py"
    assert Path(data_root) == tmp_path / "data" / "shapes"
