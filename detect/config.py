"""Strict yaml -> frozen dataclass loading, and the training hyper-parameters (hyp yaml)."""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import types
import typing
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from detect.errors import ConfigError, UserError, refuse_unknown_keys, short_repr

T = TypeVar("T")
LOGGER = logging.getLogger(__name__)

# The bundled model, hyp and data yamls: package data (pyproject.toml), so a wheel install has them too.
# pip installs packages as folders, so the resource is a real path, which data yamls need to resolve `path`.
CONFIGS_DIR = Path(str(resources.files("detect") / "configs"))


# Bounds on a yaml file, checked before its values are built. The largest config is a data yaml's `names` (or a run's
# config.yaml holding them): 50,000 classes (models/head.py's bound) of 100 characters each are 5 MB. PyYAML reads
# about 0.5 MB a second and holds 50x the text while it does.
MAX_YAML_BYTES = 8 * 2**20
# Aliases may repeat at most this many nodes in all. A config that shares a block through an anchor repeats tens;
# a "billion laughs" file (ten aliases of ten aliases, eight deep: 10^8 nodes from 90) is refused as it is read,
# before any check walks or prints the expanded values (which took minutes and gigabytes).
MAX_ALIAS_NODES = 100_000


class BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a document whose aliases repeat more than MAX_ALIAS_NODES nodes, or an alias
    inside its own anchor (a value that contains itself)."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        added = alias_repeats(node)
        if added > MAX_ALIAS_NODES:
            raise yaml.YAMLError(f"its aliases repeat {added:,} nodes, more than the {MAX_ALIAS_NODES:,} a config may "
                                 "(an alias bomb?)")
        return self.construct_document(node)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def alias_repeats(root: yaml.Node) -> int:
    """How many nodes the aliases of a composed document add when written out in full (counted, never built); a
    YAMLError for an alias inside its own anchor. Iterative, so that a deep document cannot exhaust the stack."""
    sizes: dict[int, int] = {}  # each distinct node: its size with the aliases under it written out
    path: set[int] = set()  # the nodes from the root to the one on top of the stack
    stack = [root]
    while stack:
        node = stack[-1]
        if id(node) in sizes:
            stack.pop()
        elif id(node) in path:  # back on top: its children are counted
            stack.pop()
            path.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in _children(node))
        else:
            path.add(id(node))
            for child in _children(node):
                if id(child) in path:
                    raise yaml.YAMLError("an alias refers to a node that contains it (a value cannot contain itself)")
                if id(child) not in sizes:
                    stack.append(child)
    return sizes[id(root)] - len(sizes)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a yaml file whose top level is a mapping (BoundedLoader, at most MAX_YAML_BYTES); a missing, malformed
    or oversized file is a ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise ConfigError(f"{path}: {size:,} bytes, more than a config may hold ({MAX_YAML_BYTES:,})")
    try:
        data = yaml.load(path.read_text(), Loader=BoundedLoader)  # a SafeLoader: plain values only
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid yaml: not UTF-8 text") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid yaml: {yaml_problem(error)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid yaml: nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    return data


def yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line: what is wrong, and where (1-based line and column)."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


@dataclasses.dataclass(frozen=True)
class Bound:
    """The values a number may take; `what` completes "must be ..." in an error."""

    what: str
    accept: Callable[[Any], bool]


POSITIVE = Bound("a positive integer", lambda value: value >= 1)
NON_NEGATIVE = Bound("an integer >= 0", lambda value: value >= 0)
UNIT = Bound("a number in [0, 1]", lambda value: 0 <= value <= 1)  # nan compares false: refused
# The largest image side (--imgsz of every CLI, the hub's size): 6.4x the 1280 px that yolov5's largest models are
# trained at. yolov5n alone takes 7 GB of memory to predict one image at 8192 px on the CPU, and the memory grows
# with the square of the side: a larger input can only exhaust the machine (predict --imgsz 100000 did).
MAX_IMGSZ = 8192
IMAGE_SIZE = Bound(f"an integer in [1, {MAX_IMGSZ}]", lambda value: 1 <= value <= MAX_IMGSZ)


def resolve_config(name: str | Path, kind: str) -> Path:
    """A bare file name is looked up in the bundled configs/<kind>/; anything else is taken as a path."""
    path = Path(name)
    if path.is_file() or len(path.parts) > 1:
        return path
    bundled = CONFIGS_DIR / kind / path.name
    if not bundled.suffix:
        bundled = bundled.with_suffix(".yaml")
    if bundled.is_file():
        return bundled
    choices = ", ".join(sorted(p.name for p in (CONFIGS_DIR / kind).glob("*.yaml")))
    raise ConfigError(f"{name}: no such file, and not one of configs/{kind}/ ({choices})")


def _type_ok(value: Any, annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:  # yaml writes 1.0 as 1 often enough; an int is a fine float, if a float can hold it
        return isinstance(value, float) or isinstance(value, int) and not isinstance(value, bool) and \
            abs(value) <= sys.float_info.max
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return isinstance(value, (list, tuple)) and all(_type_ok(v, args[0]) for v in value) if args else True
    if origin is dict:
        return isinstance(value, dict)
    return isinstance(value, annotation)


def type_name(annotation: Any) -> str:
    """How an error names a type: `int`, `list[dict]`, `str | None`."""
    if typing.get_origin(annotation) is not None or isinstance(annotation, types.UnionType):
        return str(annotation).replace("typing.", "").replace("NoneType", "None")
    return getattr(annotation, "__name__", str(annotation))


def _wrong_item(value: Any, annotation: Any) -> str:
    """For a list or tuple that fails its annotation: ' (item i is a <type>)' naming the first wrong item."""
    args = [arg for arg in typing.get_args(annotation) if arg is not Ellipsis]
    if typing.get_origin(annotation) in (list, tuple) and args and isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            if not _type_ok(item, args[0]):
                return f" (item {index} is a {type(item).__name__}, not a {type_name(args[0])})"
    return ""


def settings_fields(settings: Any) -> list[dataclasses.Field]:
    """A settings class's (or object's) fields in the order its flags and messages list them: its own, then the
    keyword-only ones of a group it inherits (SlicingFlags)."""
    return sorted(dataclasses.fields(settings), key=lambda field: field.kw_only)


def from_mapping(cls: type[T], data: dict[str, Any], source: str | Path) -> T:
    """Build dataclass `cls` from `data`; an unknown key, missing key or wrong type names key and source."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in settings_fields(cls)}
    refuse_unknown_keys(data, fields, f"{source}:")
    values = {}
    for name, field in fields.items():
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{source}: missing key '{name}'")
            continue
        value = data[name]
        if not _type_ok(value, hints[name]):
            raise ConfigError(f"{source}: key '{name}' must be {type_name(hints[name])}, got "
                              f"{type(value).__name__} {short_repr(value)}{_wrong_item(value, hints[name])}")
        values[name] = float(value) if hints[name] is float else value
    try:
        return cls(**values)
    except ValueOutOfRange as error:
        raise ConfigError(f"{source}: {error}") from None


def load_dataclass(cls: type[T], path: str | Path) -> T:
    """Read yaml file `path` into dataclass `cls`, strictly (see from_mapping)."""
    return from_mapping(cls, read_yaml(path), path)


class ValueOutOfRange(ConfigError):
    """A key's value outside the range it may take; from_mapping adds the file that holds it."""


def _finite_range(what: str, low: float, high: float = math.inf, low_open: bool = False,
                  high_open: bool = False) -> Bound:
    """Finite numbers from low to high (each end included unless open); NaN, inf and ints past a float are refused."""
    def accept(value: float) -> bool:
        try:
            value = float(value)
        except OverflowError:
            return False
        return (math.isfinite(value) and (low < value if low_open else low <= value)
                and (value < high if high_open else value <= high))

    return Bound(what, accept)


FINITE_POSITIVE = _finite_range("a finite number > 0", 0, low_open=True)
FINITE_NON_NEGATIVE = _finite_range("a finite number >= 0", 0)
PROBABILITY = _finite_range("a number in [0, 1]", 0, 1)
BELOW_ONE = _finite_range("a number in [0, 1)", 0, 1, high_open=True)
AT_LEAST_ONE = _finite_range("a finite number >= 1", 1)
ABOVE_ONE = _finite_range("a finite number > 1", 1, low_open=True)
SHEAR = _finite_range("a number of degrees in [0, 90)", 0, 90, high_open=True)
STEPS = Bound("an integer in [1, 2**31)", lambda value: 1 <= value < 2**31)  # steps; torch takes a C++ integer
# yolov5's hyp `anchors`: 0 keeps the model's anchors, else it is rounded to the anchors per level; 10 is the top of
# the range yolov5's --evolve gives it (train.py, meta["anchors"]).
ANCHORS_PER_LEVEL = Bound("0 (the model's anchors) or a number that rounds to 1-10 anchors per level",
                          lambda value: value == 0 or math.isfinite(value) and 1 <= round(value) <= 10)


def bounded(default: Any, bound: Bound | None = None) -> Any:
    """A key of a config dataclass: its default and the values it may take (None: any), which `check_bounds` checks
    when the dataclass is made."""
    return dataclasses.field(default=default, metadata={"bound": bound})


def check_bounds(config: Any) -> None:
    """ValueOutOfRange naming the first key of a dataclass made with `bounded` whose value is outside its bound."""
    for field in dataclasses.fields(config):
        value, bound = getattr(config, field.name), field.metadata.get("bound")
        if bound is not None and not bound.accept(value):
            raise ValueOutOfRange(f"key '{field.name}' must be {bound.what}, got {short_repr(value)}")


@dataclasses.dataclass(frozen=True)
class Hyp:
    """Training hyper-parameters; names and meanings as in ultralytics/yolov5 hyp yamls
    (docs/yolov5.md, "Hyper-parameters"). Each key has its range (NaN and inf never fit): a value outside it is refused
    when the Hyp is made, from a file, a checkpoint's stored hyp or an --evolve proposal."""

    lr0: float = bounded(0.01, FINITE_POSITIVE)  # initial learning rate
    lrf: float = bounded(0.01, FINITE_NON_NEGATIVE)  # final learning rate, a fraction of lr0
    momentum: float = bounded(0.937, BELOW_ONE)  # SGD momentum, Adam's beta1 (torch refuses 1 and above)
    weight_decay: float = bounded(0.0005, FINITE_NON_NEGATIVE)
    warmup_epochs: float = bounded(3.0, FINITE_NON_NEGATIVE)  # fractions of an epoch count
    warmup_momentum: float = bounded(0.8, BELOW_ONE)
    warmup_bias_lr: float = bounded(0.1, FINITE_NON_NEGATIVE)
    box: float = bounded(0.05, FINITE_NON_NEGATIVE)  # loss gains: 0 turns that loss off
    cls: float = bounded(0.5, FINITE_NON_NEGATIVE)
    cls_pw: float = bounded(1.0, FINITE_POSITIVE)  # BCE positive weights
    obj: float = bounded(1.0, FINITE_NON_NEGATIVE)
    obj_pw: float = bounded(1.0, FINITE_POSITIVE)
    iou_t: float = bounded(0.20, PROBABILITY)  # an IoU
    anchor_t: float = bounded(4.0, AT_LEAST_ONE)  # a size ratio: below 1 no target matches any anchor
    # hyp.VOC.yaml's and hyp.Objects365.yaml's: a new run's model gets round(anchors) anchors per level, computed from
    # the labels by AutoAnchor (the model yaml's and the weights' are dropped), as yolov5's train.py does. 0: not set.
    anchors: float = bounded(0.0, ANCHORS_PER_LEVEL)
    fl_gamma: float = bounded(0.0, FINITE_NON_NEGATIVE)  # 0: no focal loss
    hsv_h: float = bounded(0.015, FINITE_NON_NEGATIVE)  # augmentation gains, fractions and degrees: 0 turns one off
    hsv_s: float = bounded(0.7, FINITE_NON_NEGATIVE)
    hsv_v: float = bounded(0.4, FINITE_NON_NEGATIVE)
    degrees: float = bounded(0.0, FINITE_NON_NEGATIVE)
    translate: float = bounded(0.1, PROBABILITY)  # a fraction of the image side
    scale: float = bounded(0.5, BELOW_ONE)  # gain 1 +- scale: 1 would allow a zero-size image
    shear: float = bounded(0.0, SHEAR)
    perspective: float = bounded(0.0, FINITE_NON_NEGATIVE)
    flipud: float = bounded(0.0, PROBABILITY)  # probabilities
    fliplr: float = bounded(0.5, PROBABILITY)
    mosaic: float = bounded(1.0, PROBABILITY)
    mixup: float = bounded(0.0, PROBABILITY)
    copy_paste: float = bounded(0.0, PROBABILITY)
    # Ours: probability of each albumentations op (blur, median blur, gray, CLAHE); 0 turns the stage off.
    albumentations_p: float = bounded(0.01, PROBABILITY)
    # Ours: the AMP GradScaler (torch.amp defaults; torch refuses a growth factor of 1 or less).
    amp_init_scale: float = bounded(65536.0, FINITE_POSITIVE)
    amp_growth_factor: float = bounded(2.0, ABOVE_ONE)
    amp_growth_interval: int = bounded(2000, STEPS)
    # Ours: knowledge distillation (--teacher, docs/usage.md "Distillation"): the distillation term's gain, and the
    # share of the run's last epochs trained without it (mmyolo's RTMDet distillation stops for the last 20 of 300).
    distill: float = bounded(0.1, FINITE_NON_NEGATIVE)
    distill_off: float = bounded(0.0667, BELOW_ONE)

    def __post_init__(self) -> None:
        check_bounds(self)


def load_hyp(name: str | Path = "scratch-low.yaml") -> Hyp:
    """Load a hyp yaml by bare name (configs/hyps/) or path; yolov5's names (hyp.VOC.yaml, data/hyps/hyp.VOC.yaml)
    that are not files here are our copies of its five hyp files."""
    return load_dataclass(Hyp, resolve_config(_bundled_yolov5_hyp(Path(name)), "hyps"))


def _bundled_yolov5_hyp(path: Path) -> Path:
    """`hyp.X.yaml`, bare or under data/hyps/ as yolov5's commands give it, as configs/hyps/X.yaml when it is not a
    file here and we bundle X.yaml; any other path as it is."""
    bundled = path.name.removeprefix("hyp.")
    is_yolov5_name = path.name.startswith("hyp.") and path.parent.as_posix() in (".", "data/hyps")
    if path.is_file() or not is_yolov5_name or not (CONFIGS_DIR / "hyps" / bundled).is_file():
        return path
    if path.parent != Path("."):
        LOGGER.info("%s: not here; reading our copy of yolov5's, configs/hyps/%s", path, bundled)
    return Path(bundled)


# --- settings that are also command-line flags -----------------------------------------------------------------
# A CLI's settings are one frozen dataclass whose fields are made with `option`: the field's default is the one
# default, its metadata what the flag needs (detect/cli.py makes the flags), and `check_options` the one range check,
# the same for `python -m detect.x --flag` and `detect.x.run(flag=...)`.

def option(default: Any = dataclasses.MISSING, description: str = "", *, bound: Bound | None = None,
           flags: tuple[str, ...] = (), choices: tuple[str, ...] | None = None, const: Any = None,
           again_on_resume: bool = False) -> Any:
    """A settings field and what its flag needs: `flags` replaces the --name spelling (aliases after it), `const`
    makes the value optional after the flag, `again_on_resume` lets train's --resume take a new value. No default:
    the flag is required."""
    metadata = {"help": description, "bound": bound, "flags": flags, "choices": choices, "const": const,
                "again_on_resume": again_on_resume}
    return dataclasses.field(default=default, metadata=metadata)


def flag_name(field: dataclasses.Field) -> str:
    """The field's command-line spelling: --batch-size for batch_size, or its own first flag."""
    return (field.metadata.get("flags") or (f"--{field.name.replace('_', '-')}",))[0]


def check_options(settings: Any) -> None:
    """A UserError naming the flag of the first field outside its bound or choices."""
    for field in settings_fields(settings):
        value = getattr(settings, field.name)
        bound, choices = field.metadata.get("bound"), field.metadata.get("choices")
        values = value if isinstance(value, tuple) else (value,)
        if bound is not None and not all(v is None or bound.accept(v) for v in values):
            raise UserError(f"{flag_name(field)} {short_repr(value)}: must be {bound.what}")
        if choices is not None and not all(v is None or v in choices for v in values):
            raise UserError(f"{flag_name(field)} {short_repr(value)}: choose one of {', '.join(choices)}")


class Settings:
    """Base of the settings dataclasses made with `option`: their fields are checked when made (check_options);
    a subclass with checks of its own calls super().__post_init__() first."""

    def __post_init__(self) -> None:
        check_options(self)


def options_from_dict(cls: type[T], values: dict[str, Any], source: str) -> T:
    """Settings from keyword arguments or a stored dict: a tuple field also takes a list or one value; an unknown
    key or a wrong type names it and `source`."""
    hints = typing.get_type_hints(cls)
    values = dict(values)
    for name, value in values.items():
        kinds = typing.get_args(hints[name]) if isinstance(hints.get(name), types.UnionType) else (hints.get(name),)
        if any(typing.get_origin(kind) is tuple for kind in kinds) and value is not None:
            values[name] = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    return from_mapping(cls, values, source)
