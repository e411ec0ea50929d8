"""Data yaml: the yolov5 layout, names as list or dict, relative paths, image lists, strict keys."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from detect.data import load_data_config, load_split
from detect.data.data_config import check_sources
from detect.errors import ConfigError, UserError
from tests.data.helpers import simple_dataset


def _write(path: Path, content: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(content))
    return path


def test_names_dict_and_relative_path_from_the_yaml_folder(tmp_path: Path) -> None:
    simple_dataset(tmp_path / "set", count=2)
    source = _write(tmp_path / "configs" / "d.yaml", {"path": "../set", "train": "images/train", "val": "images/train",
                                                       "names": {0: "a", 1: "b", 2: "c"}, "nc": 3,
                                                       "download": "never run"})
    config = load_data_config(source)
    assert config.names == ("a", "b", "c") and config.root == (tmp_path / "set").resolve()
    assert len(load_split(config, "val").records) == 2


def test_relative_path_falls_back_to_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    simple_dataset(tmp_path / "datasets" / "mine", count=2)
    source = _write(tmp_path / "elsewhere" / "d.yaml", {"path": "datasets/mine", "train": "images/train",
                                                         "val": "images/train", "names": ["a", "b", "c"]})
    monkeypatch.chdir(tmp_path)
    assert load_data_config(source).root == (tmp_path / "datasets" / "mine").resolve()


def test_txt_list_and_list_of_folders(tmp_path: Path) -> None:
    simple_dataset(tmp_path, count=4)
    (tmp_path / "train.txt").write_text("./images/train/0000.png\nimages/train/0001.png\n")
    source = _write(tmp_path / "d.yaml", {"train": "train.txt", "val": ["images/train", "images/train"],
                                          "names": ["a", "b", "c"]})
    config = load_data_config(source)
    assert [record.path.name for record in load_split(config, "train").records] == ["0000.png", "0001.png"]
    assert len(load_split(config, "val").records) == 8


@pytest.mark.parametrize("content,message", [
    ({"train": "x", "val": "x", "names": ["a"], "colour": 1}, "unknown key 'colour'"),
    ({"train": "x", "val": "x", "names": ["a"], "nc": 2}, "nc is 2"),
    ({"train": "x", "names": ["a"]}, "missing key 'val'"),
    ({"train": "x", "val": "x", "names": {1: "a"}}, "must map 0..0"),
])
def test_bad_yaml_names_the_problem(tmp_path: Path, content: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_data_config(_write(tmp_path / "d.yaml", content))


def test_missing_split_folder_is_a_user_error(tmp_path: Path) -> None:
    source = _write(tmp_path / "d.yaml", {"train": "nowhere", "val": "nowhere", "names": ["a"]})
    with pytest.raises(UserError, match="nowhere: no such image folder"):
        load_split(load_data_config(source), "train")


def test_bundled_configs_load() -> None:
    for name in ("coco128", "coco", "shapes"):
        config = load_data_config(name)
        assert config.num_classes == (5 if name == "shapes" else 80)
    assert load_data_config("coco").json_files["val"].name == "instances_val2017.json"


def test_check_sources_names_the_key_of_a_missing_source(tmp_path: Path) -> None:
    simple_dataset(tmp_path / "set", count=1)
    source = _write(tmp_path / "set" / "d.yaml", {"train": "images/train", "val": ["images/train", "images/gone"],
                                                  "test": "images/absent", "names": ["a"]})
    config = load_data_config(source)
    check_sources(config, ("train",))  # only the splits asked for are looked at
    with pytest.raises(ConfigError, match=rf"d\.yaml: 'val' names {tmp_path}/set/images/gone, which does not exist"):
        check_sources(config, ("train", "val", "test"))
    # A built-in dataset is generated on first use: not looked for before.
    check_sources(load_data_config(_write(tmp_path / "b.yaml", {"builtin": "shapes", "path": "nowhere",
                                                                "train": "a", "val": "b", "names": ["x"]})), ("val",))
