"""`python -m detect.tools.benchmark`: train img/s (fp32 and AMP), inference img/s, peak memory and an epoch-time
estimate for one model, image size and batch on this device; prints the migration table and writes JSON, so that
CPU, GPU and NPU runs can be put side by side with --compare.

    python -m detect.tools.benchmark --cfg yolov5s.yaml --imgsz 640 --batch-size 16 --device auto
    python -m detect.tools.benchmark --compare runs/benchmark/cpu_yolov5s_640_16.json runs/benchmark/npu_yolov5s_640_16.json

Rates are model-only (one fixed synthetic batch on the device; no data loading, no NMS).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import platform
from pathlib import Path

import torch
import torchvision

import detect
from detect import atomic_file, cli
from detect.backend.cpu import cpu_description
from detect.config import NON_NEGATIVE, POSITIVE, option
from detect.errors import UserError
from detect.tools.throughput import Measurement, measure_inference, measure_train
from detect.tools.workload import PRECISIONS, WorkloadSettings, build_tool_model, select_backend, synthetic_batch

SCHEMA = 1
COCO_TRAIN_IMAGES, COCO_VAL_IMAGES = 118_287, 5_000  # COCO 2017 train and val
FIELDS = ("tool", "schema", "created", "device", "device_name", "versions", "model", "parameters", "imgsz",
          "batch_size", "warmup", "steps", "train_images", "val_images", "threads", "rows")
ROW_FIELDS = ("config", "mode", "precision", "img_per_s", "memory_gb", "epoch_seconds")


@dataclasses.dataclass(frozen=True)
class BenchmarkSettings(WorkloadSettings):
    """The options of `python -m detect.tools.benchmark`."""

    device: str = option("auto", "the device to measure")
    precisions: tuple[str, ...] = option(("fp32", "amp"), "what to measure: fp32, amp (the device's AMP dtype: fp16 on "
                                                         "accelerators), fp16, bf16", choices=PRECISIONS)
    warmup: int = option(3, "untimed steps per phase", bound=NON_NEGATIVE)
    steps: int = option(10, "timed steps per phase", bound=POSITIVE)
    train_images: int = option(COCO_TRAIN_IMAGES, "images per training epoch, for the time estimate (default: COCO "
                                                  "train2017)", bound=POSITIVE)
    val_images: int = option(COCO_VAL_IMAGES, "images per validation pass, for the time estimate (default: COCO "
                                              "val2017)", bound=POSITIVE)
    json: str | None = option(None, "where to write the results (default: runs/benchmark/"
                                    "<device>_<model>_<imgsz>_<batch>.json)")
    compare: tuple[str, ...] | None = option(None, "print B's ratios to A for two earlier results (A.json B.json) "
                                                   "instead of measuring")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compare is not None and len(self.compare) != 2:
            raise UserError(f"--compare takes two result files (A.json B.json), got {len(self.compare)}")


parse_args = cli.settings_reader(BenchmarkSettings, "python -m detect.tools.benchmark", __doc__)


def row(measurement: Measurement, images: int, precision: str) -> dict:
    """One table row: config (e.g. "train amp", "train bf16": the mode and the precision asked for), its numbers, and
    the time `images` images take at that rate."""
    config = f"{measurement.mode} {precision}"
    return {"config": config, "mode": measurement.mode, "precision": measurement.precision,
            "img_per_s": measurement.img_per_s, "memory_gb": measurement.peak_memory_bytes / 1e9,
            "epoch_seconds": images / measurement.img_per_s}


def measure(args: BenchmarkSettings) -> dict:
    """Every phase on this device; the result as the JSON document."""
    model = build_tool_model(args.cfg, args.weights, args.nc, args.seed)
    batch = synthetic_batch(args.batch_size, args.imgsz, model.nc, args.seed)
    backends = {precision: select_backend(args.device, precision, args) for precision in args.precisions}
    rows = [row(measure_train(model, batch, backend, args.imgsz, args.warmup, args.steps), args.train_images, name)
            for name, backend in backends.items()]
    rows += [row(measure_inference(model, batch, backend, args.warmup, args.steps), args.val_images, name)
             for name, backend in backends.items()]
    backend = next(iter(backends.values()))
    return {
        "tool": "detect.tools.benchmark", "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(backend.device), "device_name": backend.device_name(), "cpu": cpu_description(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "torchvision": torchvision.__version__, "detect": detect.__version__},
        "model": args.weights or args.cfg, "parameters": sum(p.numel() for p in model.parameters()),
        "imgsz": args.imgsz, "batch_size": args.batch_size, "warmup": args.warmup, "steps": args.steps,
        "train_images": args.train_images, "val_images": args.val_images, "threads": torch.get_num_threads(),
        "rows": rows,
    }


def label(item: dict) -> str:
    """A row's config, with the AMP dtype: "train fp32", "train amp (bf16)", "train fp16"."""
    named = item["config"].split()[-1] == item["precision"]
    return item["config"] if named else f"{item['config']} ({item['precision']})"


def _clock(seconds: float) -> str:
    minutes, second = divmod(round(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{second:02d}"


def table(result: dict) -> str:
    """The migration write-up's table: config | throughput img/s | memory GB | time."""
    title = (f"{result['model']} at {result['imgsz']} px, batch {result['batch_size']}, on {result['device']} "
             f"({result['device_name']})")
    lines = [title, *([result["cpu"]] if "cpu" in result else []), "| config | throughput img/s | memory GB | time |", "|---|---:|---:|---:|"]
    for item in result["rows"]:
        images = result["train_images"] if item["mode"] == "train" else result["val_images"]
        what = "per epoch" if item["mode"] == "train" else "per val pass"
        lines.append(f"| {label(item)} | {item['img_per_s']:.1f} | {item['memory_gb']:.2f} | "
                     f"{_clock(item['epoch_seconds'])} {what} of {images} images |")
    return "\n".join(lines)


def load_result(path: str) -> dict:
    """A benchmark JSON with every field, else one UserError line naming the file and what is wrong."""
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not a readable benchmark JSON ({type(error).__name__}: {error})") from None
    missing = [field for field in FIELDS if field not in result] + [
        f"rows[].{field}" for item in result.get("rows", []) for field in ROW_FIELDS if field not in item]
    if missing:
        raise UserError(f"{path}: not a benchmark result of this tool (missing {', '.join(missing[:3])})")
    return result


def ratios(first: dict, second: dict) -> str:
    """B's rates, memory and times relative to A's, for the configs both measured."""
    lines = [f"A: {first['device']} ({first['device_name']})  B: {second['device']} ({second['device_name']})"]
    workload = ("model", "imgsz", "batch_size")
    if any(first[key] != second[key] for key in workload):
        lines.append("note: not the same workload (" + ", ".join(f"{key} {first[key]} vs {second[key]}"
                                                                   for key in workload) + ")")
    lines += ["| config | A img/s | B img/s | B/A speed | A GB | B GB | B/A memory |", "|---|---:|---:|---:|---:|---:|---:|"]
    theirs = {item["config"]: item for item in second["rows"]}
    for a in first["rows"]:
        b = theirs.get(a["config"])
        if b is not None:
            memory = f"{b['memory_gb'] / a['memory_gb']:.2f}x" if a["memory_gb"] else "-"
            config = a["config"] if a["precision"] == "fp32" else f"{a['config']} ({a['precision']} vs {b['precision']})"
            lines.append(f"| {config} | {a['img_per_s']:.1f} | "
                         f"{b['img_per_s']:.1f} | {b['img_per_s'] / a['img_per_s']:.2f}x | {a['memory_gb']:.2f} | "
                         f"{b['memory_gb']:.2f} | {memory} |")
    return "\n".join(lines)


def default_json(result: dict, args: BenchmarkSettings) -> Path:
    kind = result["device"].split(":")[0]
    return Path("runs/benchmark") / f"{kind}_{Path(args.weights or args.cfg).stem}_{args.imgsz}_{args.batch_size}.json"


def benchmark(args: BenchmarkSettings) -> None:
    """Measure and write the results (or, with --compare, print two earlier results' ratios)."""
    if args.compare:
        print(ratios(*(load_result(path) for path in args.compare)))
        return
    result = measure(args)
    path = Path(args.json) if args.json else default_json(result, args)
    atomic_file.write_text(path, json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"written to {path}")


main = cli.main_for(parse_args, benchmark)


if __name__ == "__main__":
    cli.exit_process(main())
