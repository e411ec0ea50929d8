"""The strict yaml loader and the bundled hyp files."""

import dataclasses
import time
import tracemalloc

import pytest

from detect.config import MAX_YAML_BYTES, Hyp, load_hyp
from detect.errors import ConfigError, short_repr


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


@pytest.mark.parametrize("text, message", [
    ("lr0: .nan\n", "key 'lr0' must be a finite number > 0, got nan"),  # case 13: trained 10 steps, then diverged
    ("lr0: .inf\n", "key 'lr0' must be a finite number > 0, got inf"),
    ("lr0: 0\n", "key 'lr0' must be a finite number > 0, got 0.0"),
    ("lrf: -0.1\n", "key 'lrf' must be a finite number >= 0, got -0.1"),
    ("weight_decay: -.inf\n", "key 'weight_decay' must be a finite number >= 0, got -inf"),
    ("momentum: 1.0\n", "key 'momentum' must be a number in [0, 1), got 1.0"),
    ("warmup_epochs: .nan\n", "key 'warmup_epochs' must be a finite number >= 0, got nan"),
    ("box: -1\n", "key 'box' must be a finite number >= 0, got -1.0"),
    ("cls_pw: 0\n", "key 'cls_pw' must be a finite number > 0, got 0.0"),
    ("anchor_t: 0.5\n", "key 'anchor_t' must be a finite number >= 1, got 0.5"),
    ("hsv_v: .nan\n", "key 'hsv_v' must be a finite number >= 0, got nan"),
    ("degrees: -10\n", "key 'degrees' must be a finite number >= 0, got -10.0"),
    ("scale: 1.0\n", "key 'scale' must be a number in [0, 1), got 1.0"),
    ("shear: 90\n", "key 'shear' must be a number of degrees in [0, 90), got 90.0"),
    ("fliplr: 1.5\n", "key 'fliplr' must be a number in [0, 1], got 1.5"),
    ("mosaic: .nan\n", "key 'mosaic' must be a number in [0, 1], got nan"),
    ("amp_growth_factor: 1.0\n", "key 'amp_growth_factor' must be a finite number > 1, got 1.0"),
    ("amp_growth_interval: 0\n", "key 'amp_growth_interval' must be an integer in [1, 2**31), got 0"),
    (f"amp_growth_interval: {10**400}\n", "key 'amp_growth_interval' must be an integer in [1, 2**31), got 1000"),
    (f"amp_init_scale: {10**400}\n", "key 'amp_init_scale' must be float, got int 1000"),  # past a float
])
def test_a_hyp_value_outside_its_range_is_one_line_naming_file_key_and_value(tmp_path, text, message):
    path = tmp_path / "hyp.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_hyp(path)
    assert str(error.value).startswith(f"{path}: {message}") and len(str(error.value)) < 300


def test_zero_is_allowed_where_it_turns_a_stage_off(tmp_path):
    path = tmp_path / "hyp.yaml"
    off = ("lrf", "momentum", "weight_decay", "warmup_epochs", "warmup_momentum", "warmup_bias_lr", "box", "cls", "obj",
           "iou_t", "fl_gamma", "hsv_h", "hsv_s", "hsv_v", "degrees", "translate", "scale", "shear", "perspective",
           "flipud", "fliplr", "mosaic", "mixup", "copy_paste", "albumentations_p")
    path.write_text("".join(f"{key}: 0\n" for key in off) + "translate: 1\nflipud: 1\nanchor_t: 1\n")
    hyp = load_hyp(path)
    assert hyp.mosaic == 0 and hyp.degrees == 0 and hyp.translate == 1 and hyp.anchor_t == 1


def test_every_hyp_key_has_a_range_its_default_is_in():
    for field in dataclasses.fields(Hyp):
        assert field.metadata["bound"].accept(field.default), field.name


def alias_bomb(levels: int, fan_out: int = 10) -> str:
    """A hyp whose known key `lrf` holds a billion-laughs list: each anchor a list of `fan_out` aliases of the last,
    `levels` deep (fan_out ** levels leaves written out, a few hundred bytes of yaml)."""
    text = "lr0: 0.01\nlrf:\n  - &a0 [0.01]\n"
    for level in range(1, levels + 1):
        text += f"  - &a{level} [{', '.join([f'*a{level - 1}'] * fan_out)}]\n"
    return text


def test_an_alias_bomb_is_refused_as_it_is_read(tmp_path):
    path = tmp_path / "hyp.yaml"
    path.write_text(alias_bomb(levels=8))
    started = time.perf_counter()
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=r"its aliases repeat 234,567,890 nodes, more than the 100,000") as error:
            load_hyp(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 5 and peak < 50 * 2**20
    assert str(error.value).startswith(f"{path}: not valid yaml:") and len(str(error.value)) < 300


def test_aliases_that_repeat_a_little_are_fine_and_a_value_that_contains_itself_is_refused(tmp_path):
    path = tmp_path / "hyp.yaml"
    path.write_text("lr0: &rate 0.02\nlrf: *rate\n")
    assert (load_hyp(path).lr0, load_hyp(path).lrf) == (0.02, 0.02)
    path.write_text(alias_bomb(levels=4))  # 11,110 repeats: under the bound, then refused by the key's type
    with pytest.raises(ConfigError, match=r"key 'lrf' must be float, got list \[\[0.01\], \[\[...\], \[...\], \[...\], \[...\], ...\], "):
        load_hyp(path)
    path.write_text("lr0: &loop [*loop]\n")
    with pytest.raises(ConfigError, match="an alias refers to a node that contains it"):
        load_hyp(path)


def test_a_deep_a_binary_or_a_huge_yaml_is_one_line(tmp_path):
    path = tmp_path / "hyp.yaml"
    path.write_text("lr0: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="not valid yaml: nested too deeply"):
        load_hyp(path)
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ConfigError, match="not valid yaml: not UTF-8 text"):
        load_hyp(path)
    with open(path, "wb") as handle:  # sparse: no disk used
        handle.truncate(MAX_YAML_BYTES + 1)
    with pytest.raises(ConfigError, match=f"{MAX_YAML_BYTES + 1:,} bytes, more than a config may hold"):
        load_hyp(path)


def test_a_long_value_in_an_error_is_shown_short(tmp_path):
    path = tmp_path / "hyp.yaml"
    path.write_text(f"lr0: {'x' * 100_000}\n")
    with pytest.raises(ConfigError, match=r"key 'lr0' must be float, got str 'x{27}\.\.\.x{28}'$"):
        load_hyp(path)
    assert short_repr(list(range(10**6))) == "[0, 1, 2, 3, ...]"


# A few of each yolov5 hyp file's values (data/hyps/hyp.<name>.yaml), which tell the five apart.
YOLOV5_HYPS = {
    "scratch-low": {"lrf": 0.01, "cls": 0.5, "scale": 0.5, "mixup": 0.0, "copy_paste": 0.0, "anchors": 0.0},
    "scratch-med": {"lrf": 0.1, "cls": 0.3, "scale": 0.9, "mixup": 0.1, "copy_paste": 0.0, "anchors": 0.0},
    "scratch-high": {"lrf": 0.1, "cls": 0.3, "scale": 0.9, "mixup": 0.1, "copy_paste": 0.1, "anchors": 0.0},
    "Objects365": {"lr0": 0.00258, "momentum": 0.779, "anchor_t": 3.44, "anchors": 3.2, "translate": 0.0902},
    "VOC": {"lr0": 0.00334, "momentum": 0.74832, "anchor_t": 3.3744, "anchors": 3.412, "mosaic": 0.85834},
}


@pytest.mark.parametrize("name", list(YOLOV5_HYPS))
def test_yolov5s_hyp_names_read_our_copies_of_its_values(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # yolov5's data/hyps/ is not here
    bundled = load_hyp(f"hyp.{name}.yaml")
    assert load_hyp(f"data/hyps/hyp.{name}.yaml") == load_hyp(f"./data/hyps/hyp.{name}.yaml") == bundled
    assert load_hyp(f"{name}.yaml") == bundled
    assert {key: getattr(bundled, key) for key in YOLOV5_HYPS[name]} == YOLOV5_HYPS[name]
    assert (bundled.albumentations_p, bundled.amp_init_scale) == (Hyp().albumentations_p, Hyp().amp_init_scale)


def test_a_yolov5_hyp_file_that_is_here_is_read_as_it_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "hyps").mkdir(parents=True)
    # yolov5's layout: comments after the values, `anchors` among the keys
    (tmp_path / "data" / "hyps" / "hyp.VOC.yaml").write_text(
        "lr0: 0.02  # initial learning rate (SGD=1E-2, Adam=1E-3)\nanchor_t: 3.0  # anchor-multiple threshold\n"
        "anchors: 4.6  # anchors per output layer (0 to ignore)\n")
    hyp = load_hyp("data/hyps/hyp.VOC.yaml")
    assert (hyp.lr0, hyp.anchor_t, hyp.anchors, hyp.lrf) == (0.02, 3.0, 4.6, Hyp().lrf)
    with pytest.raises(ConfigError, match="hyp.custom.yaml: no such file"):
        load_hyp("hyp.custom.yaml")


@pytest.mark.parametrize("value", [".nan", ".inf", "-1", "0.4", "0.5", "10.6", "100"])
def test_hyp_anchors_must_round_to_1_to_10_per_level_or_be_0(tmp_path, value):
    path = tmp_path / "hyp.yaml"
    path.write_text(f"anchors: {value}\n")
    with pytest.raises(ConfigError, match="key 'anchors' must be 0 .the model's anchors. or a number that rounds to "
                                          "1-10 anchors per level"):
        load_hyp(path)
    path.write_text("anchors: 0.51\n")
    assert load_hyp(path).anchors == 0.51


def test_the_first_runs_hyp_is_scratch_low_at_adamws_rate():
    """The README's first run changes one value of yolov5's scratch-low, with --optimizer AdamW (docs/testing.md)."""
    assert load_hyp("first-run.yaml") == dataclasses.replace(load_hyp("scratch-low.yaml"), lr0=0.002)
