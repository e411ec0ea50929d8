"""`python -m detect.data --data coco128.yaml`: check a dataset, print its summary, plot labels and a batch."""

from __future__ import annotations

from pathlib import Path

from detect import cli
from detect.config import load_hyp
from detect.data import (
    AugmentSettings,
    build_train_loader,
    load_data_config,
    load_split,
)
from detect.data.plots import plot_batch, plot_label_stats


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(prog="python -m detect.data", description=__doc__)
    parser.add_argument("--data", default="shapes.yaml", help="data yaml: a bare name in configs/data/ or a path")
    parser.add_argument("--hyp", default="scratch-low.yaml", help="augmentation settings for the batch plot")
    parser.add_argument("--imgsz", type=cli.positive_int, default=640)
    parser.add_argument("--batch-size", type=cli.positive_int, default=16)
    parser.add_argument("--plots", type=Path, default=None, help="folder for labels.png and train_batch.png")
    args = parser.parse_args(argv)

    def body() -> None:
        config = load_data_config(args.data)
        splits = {name: load_split(config, name) for name in config.splits}  # each logs its check table
        if args.plots is not None and "train" in splits:
            args.plots.mkdir(parents=True, exist_ok=True)
            train = splits["train"]
            print(plot_label_stats(train.records, train.names, args.plots / "labels.png"))
            augmentation = AugmentSettings.from_hyp(load_hyp(args.hyp))
            loader = build_train_loader(config, augmentation, args.imgsz, args.batch_size, workers=0, seed=0,
                                        pin_memory=False)
            print(plot_batch(next(iter(loader)), train.names, args.plots / "train_batch.png"))

    return cli.run(body)


if __name__ == "__main__":
    cli.exit_process(main())
