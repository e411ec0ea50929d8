"""`python -m detect.models --cfg yolov5s.yaml`: build a model and print its summary."""

from __future__ import annotations

import dataclasses

from detect import cli
from detect.config import IMAGE_SIZE, POSITIVE, Settings, option
from detect.models import build_model, summarize


@dataclasses.dataclass(frozen=True)
class ModelsSettings(Settings):
    """The options of `python -m detect.models` (yolov5's models/yolo.py takes --cfg too)."""

    cfg: str = option("yolov5s.yaml", "model yaml: a bare name in configs/models/, or a path (ours or yolov5's "
                                      "format)")
    nc: int | None = option(None, "number of classes (default: the yaml's nc)", bound=POSITIVE)
    imgsz: int = option(640, "image size for the GFLOPs count", bound=IMAGE_SIZE)
    fuse: bool = option(False, "fold BatchNorm into the convolutions first")


parse_args = cli.settings_reader(ModelsSettings, "python -m detect.models", __doc__)


def summary(settings: ModelsSettings) -> None:
    """Print the model's source and summary line."""
    model = build_model(settings.cfg, num_classes=settings.nc)
    if settings.fuse:
        model.fuse()
    print(f"{model.spec.source}: {summarize(model, settings.imgsz)}")


main = cli.main_for(parse_args, summary)


if __name__ == "__main__":
    cli.exit_process(main())
