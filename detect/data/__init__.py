"""Datasets, label checking and caching, CPU augmentation, loaders, device-side batch transforms."""

from detect.data.augment.settings import AugmentSettings
from detect.data.batch import Batch, Sample, collate
from detect.data.data_config import DataConfig, load_data_config
from detect.data.images.letterbox import LetterboxInfo, boxes_to_original
from detect.data.labels.split import LabelledSplit, load_split
from detect.data.loader import Loader, TrainLoaderSettings, ValLoaderSettings, build_train_loader, build_val_loader
from detect.data.records import ImageRecord

__all__ = [
    "AugmentSettings", "Batch", "DataConfig", "ImageRecord", "LabelledSplit", "LetterboxInfo", "Loader", "Sample",
    "TrainLoaderSettings", "ValLoaderSettings", "boxes_to_original", "build_train_loader", "build_val_loader",
    "collate", "load_data_config", "load_split",
]
