"""`python -m detect.models --cfg yolov5s.yaml`: build a model and print its summary."""

from __future__ import annotations

from detect import cli
from detect.models import build_model, summarize


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(prog="python -m detect.models", description=__doc__)
    parser.add_argument("--cfg", default="yolov5s.yaml", help="model yaml: a bare name in configs/models/ or a path")
    parser.add_argument("--nc", type=cli.positive_int, default=None, help="number of classes (default: the yaml's nc)")
    parser.add_argument("--imgsz", type=cli.positive_int, default=640, help="image size for the GFLOPs count")
    parser.add_argument("--fuse", action="store_true", help="fold BatchNorm into the convolutions first")
    args = parser.parse_args(argv)

    def body() -> None:
        model = build_model(args.cfg, num_classes=args.nc)
        if args.fuse:
            model.fuse()
        print(f"{model.spec.source}: {summarize(model, args.imgsz)}")

    return cli.run(body)


if __name__ == "__main__":
    cli.exit_process(main())
