"""A tracker's settings: one frozen dataclass per tracker of the `trackers` library, read from a yaml whose `tracker`
key names the kind (configs/trackers/<kind>.yaml holds each kind's defaults, documented there); an unknown key or a
value out of range is one line naming the key and the file."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from detect.config import (
    CONFIGS_DIR,
    FINITE_NON_NEGATIVE,
    NON_NEGATIVE,
    POSITIVE,
    UNIT,
    Bound,
    bounded,
    check_bounds,
    from_mapping,
    read_yaml,
    resolve_config,
)
from detect.errors import ConfigError, short_repr

CMC_METHODS = ("sparseOptFlow", "orb", "sift", "ecc")  # BoT-SORT's camera motion estimates (trackers' CMCMethod)
CMC_METHOD = Bound(f"one of {', '.join(CMC_METHODS)}", lambda value: value in CMC_METHODS)


@dataclasses.dataclass(frozen=True)
class _Checked:
    """Each field checked against its bound when made (from a yaml or in Python)."""

    def __post_init__(self) -> None:
        check_bounds(self)

    def library_options(self) -> dict[str, Any]:
        """The keyword arguments of the library's tracker class (every field but `tracker`)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self) if field.name != "tracker"}


# The meanings and defaults are documented in configs/trackers/<kind>.yaml; the numbers there are these.
@dataclasses.dataclass(frozen=True)
class ByteTrackSettings(_Checked):
    """trackers.ByteTrackTracker's settings."""

    tracker: str = "bytetrack"
    lost_track_buffer: int = bounded(30, NON_NEGATIVE)
    track_activation_threshold: float = bounded(0.25, UNIT)
    minimum_consecutive_frames: int = bounded(2, POSITIVE)
    minimum_iou_threshold: float = bounded(0.2, UNIT)
    high_conf_det_threshold: float = bounded(0.25, UNIT)


@dataclasses.dataclass(frozen=True)
class OCSORTSettings(_Checked):
    """trackers.OCSORTTracker's settings."""

    tracker: str = "ocsort"
    lost_track_buffer: int = bounded(30, NON_NEGATIVE)
    minimum_consecutive_frames: int = bounded(2, POSITIVE)
    minimum_iou_threshold: float = bounded(0.2, UNIT)
    direction_consistency_weight: float = bounded(0.2, FINITE_NON_NEGATIVE)
    high_conf_det_threshold: float = bounded(0.25, UNIT)
    delta_t: int = bounded(3, POSITIVE)


@dataclasses.dataclass(frozen=True)
class BoTSORTSettings(_Checked):
    """trackers.BoTSORTTracker's settings (camera motion compensation reads the frames)."""

    tracker: str = "botsort"
    lost_track_buffer: int = bounded(30, NON_NEGATIVE)
    track_activation_threshold: float = bounded(0.25, UNIT)
    minimum_consecutive_frames: int = bounded(2, POSITIVE)
    minimum_iou_threshold_first_assoc: float = bounded(0.2, UNIT)
    minimum_iou_threshold_second_assoc: float = bounded(0.5, UNIT)
    minimum_iou_threshold_unconfirmed_assoc: float = bounded(0.3, UNIT)
    high_conf_det_threshold: float = bounded(0.25, UNIT)
    enable_cmc: bool = bounded(True)
    cmc_method: str = bounded("sparseOptFlow", CMC_METHOD)
    cmc_downscale: int = bounded(2, POSITIVE)
    instant_first_frame_activation: bool = bounded(True)


TrackerSettings = ByteTrackSettings | OCSORTSettings | BoTSORTSettings
KINDS: dict[str, type[TrackerSettings]] = {"bytetrack": ByteTrackSettings, "ocsort": OCSORTSettings,
                                           "botsort": BoTSORTSettings}
TRACKER_HELP = (f"{', '.join(KINDS)} (configs/trackers/<name>.yaml: the library's settings with our defaults), or a "
                "yaml of your own whose 'tracker' key names one of them")


def load_tracker_settings(name: str | Path) -> TrackerSettings:
    """A tracker's settings by kind name (the bundled yaml) or yaml path; a bad file, key or value is a ConfigError
    naming the file."""
    path = resolve_config(name, "trackers")
    data = read_yaml(path)
    kind = data.get("tracker")
    if kind not in KINDS:
        raise ConfigError(f"{path}: key 'tracker' must be one of {', '.join(KINDS)}, got {short_repr(kind)}")
    return from_mapping(KINDS[kind], data, path)


def bundled_tracker(kind: str) -> Path:
    """The yaml that holds a kind's defaults."""
    return CONFIGS_DIR / "trackers" / f"{kind}.yaml"


def as_tracker_settings(tracker: str | Path | TrackerSettings) -> TrackerSettings:
    """Settings as given, or loaded from a kind name or yaml path."""
    return tracker if isinstance(tracker, tuple(KINDS.values())) else load_tracker_settings(tracker)
