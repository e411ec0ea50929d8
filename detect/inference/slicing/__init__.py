"""Sliced inference: windows of a full-resolution image run through a model (predictor.py), their detections merged
across the seams (merge.py)."""

from detect.inference.slicing.merge import merge_seams
from detect.inference.slicing.predictor import (
    MERGES,
    SLICE,
    SLICE_HELP,
    SLICE_MERGE_HELP,
    SLICE_OVERLAP_HELP,
    SLICE_WHOLE_HELP,
    SlicedPredictor,
    SliceSettings,
    SlicingFlags,
    TooManyWindows,
)

__all__ = ["MERGES", "SLICE", "SLICE_HELP", "SLICE_MERGE_HELP", "SLICE_OVERLAP_HELP", "SLICE_WHOLE_HELP",
           "SliceSettings", "SlicedPredictor", "SlicingFlags", "TooManyWindows", "merge_seams"]
