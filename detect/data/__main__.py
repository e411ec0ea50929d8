"""`python -m detect.data --data coco128.yaml`: check a dataset, print its summary, plot labels and a batch.
`python -m detect.data convert --data D --to yolo|coco --out DIR`: write its labels as yolov5's .txt or a COCO json."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from detect import atomic_file, cli
from detect.config import IMAGE_SIZE, POSITIVE, Settings, load_hyp, option
from detect.data import (
    AugmentSettings,
    TrainLoaderSettings,
    build_train_loader,
    load_data_config,
    load_split,
)
from detect.data.dataset_plots import plot_batch, plot_label_stats
from detect.data.images.pixels import DEFAULT_MAX_PIXELS, MAX_PIXELS, MAX_PIXELS_HELP
from detect.data.labels.check import DEFAULT_MAX_BOXES, MAX_BOXES, MAX_BOXES_HELP, ImageBounds
from detect.data.labels.convert import TARGETS, convert
from detect.data.storage.cache_places import CACHE_DIR_HELP


@dataclasses.dataclass(frozen=True)
class DataSettings(Settings):
    """The options of `python -m detect.data`."""

    data: str = option("shapes.yaml", "data yaml: a bare name in configs/data/ or a path")
    hyp: str = option("scratch-low.yaml", "augmentation settings for the batch plot")
    imgsz: int = option(640, "image size of the batch plot", bound=IMAGE_SIZE)
    batch_size: int = option(16, "images in the batch plot", bound=POSITIVE)
    plots: str | None = option(None, "folder for labels.png and train_batch.png")
    cache_dir: str | None = option(None, CACHE_DIR_HELP)
    max_pixels: int = option(DEFAULT_MAX_PIXELS, MAX_PIXELS_HELP, bound=MAX_PIXELS)
    max_boxes: int = option(DEFAULT_MAX_BOXES, MAX_BOXES_HELP, bound=MAX_BOXES)


@dataclasses.dataclass(frozen=True)
class ConvertSettings(Settings):
    """The options of `python -m detect.data convert`."""

    data: str = option(description="data yaml: a bare name in configs/data/ or a path")
    to: str = option(description="yolo: yolov5's images/ and labels/ folders; coco: a COCO json per split",
                     choices=TARGETS)
    out: str = option("converted", "folder to write (with its data.yaml)")
    copy: bool = option(False, "copy the images into yolo's images/ (default: symbolic links)")
    cache_dir: str | None = option(None, CACHE_DIR_HELP)
    max_pixels: int = option(DEFAULT_MAX_PIXELS, MAX_PIXELS_HELP, bound=MAX_PIXELS)
    max_boxes: int = option(DEFAULT_MAX_BOXES, MAX_BOXES_HELP, bound=MAX_BOXES)


parse_args = cli.settings_reader(DataSettings, "python -m detect.data", __doc__)
parse_convert_args = cli.settings_reader(ConvertSettings, "python -m detect.data convert",
                                         "Write a dataset's labels as yolov5's .txt layout or a COCO json per split.")


def check(settings: DataSettings) -> None:
    """Check every split (each logs its table); with --plots, plot the labels and one augmented batch."""
    config = load_data_config(settings.data)
    bounds = ImageBounds(settings.max_pixels, settings.max_boxes)
    splits = {name: load_split(config, name, cache_dir=settings.cache_dir, bounds=bounds) for name in config.splits}
    if settings.plots is not None and "train" in splits:
        folder = atomic_file.output_folder(Path(settings.plots), "--plots")
        train = splits["train"]
        print(plot_label_stats(train.records, train.names, folder / "labels.png"))
        augmentation = AugmentSettings.from_hyp(load_hyp(settings.hyp))
        loader = build_train_loader(train, TrainLoaderSettings(augmentation, settings.imgsz, settings.batch_size, 0,
                                                               seed=0, pin_memory=False))
        print(plot_batch(next(iter(loader)), train.names, folder / "train_batch.png"))


def write_converted(settings: ConvertSettings) -> Path:
    """Convert the --data's splits and print the data yaml written."""
    target = convert(load_data_config(settings.data), settings.to, Path(settings.out), settings.copy,
                     settings.cache_dir, ImageBounds(settings.max_pixels, settings.max_boxes))
    print(target)
    return target


def main(argv: list[str] | None = None) -> int:
    """`convert ...` converts; anything else checks."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["convert"]:
        return cli.main_for(parse_convert_args, write_converted)(argv[1:])
    return cli.main_for(parse_args, check)(argv)


if __name__ == "__main__":
    cli.exit_process(main())
