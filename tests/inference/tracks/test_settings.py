"""Tracker settings: the bundled yamls hold the dataclasses' defaults, and a bad file, key or value is one line naming
the key and the file (also through the CLI, exit 2)."""

from __future__ import annotations

import dataclasses

import pytest

from detect import track
from detect.config import read_yaml
from detect.errors import ConfigError
from detect.inference.tracks.settings import KINDS, bundled_tracker, load_tracker_settings


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_bundled_yaml_holds_its_defaults(kind):
    settings = load_tracker_settings(kind)
    assert settings == KINDS[kind]()  # the yaml documents the numbers the code defaults to
    assert set(read_yaml(bundled_tracker(kind))) == {field.name for field in dataclasses.fields(settings)}


def test_a_users_yaml_changes_what_it_names(tmp_path):
    path = tmp_path / "my.yaml"
    path.write_text("tracker: ocsort\nlost_track_buffer: 90\ndelta_t: 5\n")
    settings = load_tracker_settings(path)
    assert (settings.tracker, settings.lost_track_buffer, settings.delta_t) == ("ocsort", 90, 5)
    assert settings.minimum_iou_threshold == KINDS["ocsort"]().minimum_iou_threshold


@pytest.mark.parametrize(("text", "message"), [
    ("tracker: bytetrack\nminimum_iou_threshold: 1.5\n", "key 'minimum_iou_threshold' must be a number in [0, 1], got 1.5"),
    ("tracker: bytetrack\nlost_track_buffer: -1\n", "key 'lost_track_buffer' must be an integer >= 0, got -1"),
    ("tracker: bytetrack\nlost_track_buffr: 30\n", "unknown key 'lost_track_buffr'"),
    ("tracker: botsort\ncmc_method: flow\n", "key 'cmc_method' must be one of sparseOptFlow, orb, sift, ecc"),
    ("tracker: sort\n", "key 'tracker' must be one of bytetrack, ocsort, botsort, got 'sort'"),
    ("tracker: ocsort\ndelta_t: three\n", "key 'delta_t' must be int, got str 'three'"),
])
def test_a_bad_value_is_one_line_naming_key_and_file(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_tracker_settings(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


def test_the_cli_says_a_bad_tracker_in_one_line_before_loading_a_model(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("tracker: bytetrack\nhigh_conf_det_threshold: 2\n")
    code = track.main(["--source", str(tmp_path), "--weights", str(tmp_path / "absent.pt"), "--tracker", str(path)])
    error = capsys.readouterr().err.strip()
    assert code == 2 and error.count("\n") == 0
    assert error == f"error: {path}: key 'high_conf_det_threshold' must be a number in [0, 1], got 2.0"


def test_an_unknown_tracker_name_lists_the_bundled_ones(capsys, tmp_path):
    assert track.main(["--source", str(tmp_path), "--tracker", "deepsort"]) == 2
    assert "deepsort: no such file, and not one of configs/trackers/ (botsort.yaml, bytetrack.yaml, ocsort.yaml)" in \
        capsys.readouterr().err
