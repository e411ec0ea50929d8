"""The strict yaml loader and the bundled hyp files."""

import dataclasses

import pytest

from detect.config import Hyp, load_hyp
from detect.errors import ConfigError


def test_bundled_hyps_load_with_the_published_values():
    low, high = load_hyp("scratch-low.yaml"), load_hyp("scratch-high")
    assert low == Hyp()
    assert (high.lrf, high.obj, high.cls, high.scale, high.mixup, high.copy_paste) == (0.1, 0.7, 0.3, 0.9, 0.1, 0.1)


@pytest.mark.parametrize("text, message", [
    ("lr0: 0.01\nlr_zero: 1\n", "unknown key 'lr_zero'"),
    ("lr0: fast\n", "key 'lr0' must be float"),
    ("amp_growth_interval: 2.5\n", "key 'amp_growth_interval' must be int"),
    ("- 1\n- 2\n", "top level must be a mapping"),
    ("lr0: [\n", "not valid yaml"),
])
def test_bad_hyp_names_file_and_key(tmp_path, text, message):
    path = tmp_path / "hyp.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as error:
        load_hyp(path)
    assert str(path) in str(error.value)


def test_ints_are_accepted_as_floats_and_the_result_is_frozen(tmp_path):
    path = tmp_path / "hyp.yaml"
    path.write_text("lr0: 1\n")
    hyp = load_hyp(path)
    assert hyp.lr0 == 1.0 and isinstance(hyp.lr0, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        hyp.lr0 = 2.0
