"""COCO-size data: label check, cache load, --cache ram, loader worker memory and speed, COCO evaluator time.

Usage: python scripts/make_large_dataset.py /work/large/coco118k --images 118287
       python scripts/bench_scale.py --data /work/large/coco118k/data.yaml [--batches 2000] [--skip-check]

Each measurement runs in a fresh process of this script (--phase), so that one's memory is not another's.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

PHASES = ("check", "load", "ram", "loader", "eval")


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of a process, MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def children() -> list[int]:
    """Process ids of this process's children (the DataLoader workers)."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        found += [int(pid) for pid in (task / "children").read_text().split()]
    return sorted(found)


def check(args: argparse.Namespace) -> dict:
    """The first check: no cache, every image and label read."""
    from detect.data import load_data_config, load_split
    config = load_data_config(args.data)
    cache = Path(config.splits["train"][0]).parent.parent / "labels" / "train.detect.cache"
    cache.unlink(missing_ok=True)
    start = time.perf_counter()
    split = load_split(config, "train")
    seconds = time.perf_counter() - start
    return {"images": split.counts["found"], "seconds": seconds, "images_per_s": split.counts["found"] / seconds,
            "cores": os.cpu_count(), "skipped": split.counts["skipped"], "background": split.counts["background"]}


def load(args: argparse.Namespace) -> dict:
    """The second start: list, key, load and validate the cache, build the records; time and memory it takes."""
    from detect.data import load_data_config, load_split
    from detect.data.labels import cache as label_cache
    from detect.data.records import label_path_for
    from detect.data.storage.local import LOCAL
    config = load_data_config(args.data)
    before = rss_mb()
    start = time.perf_counter()
    split = load_split(config, "train")
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    after = rss_mb()
    images = LOCAL.list_images(config.splits["train"][0]).files
    files = images + [label_path_for(image) for image in images]
    start = time.perf_counter()
    label_cache.fingerprint(files, config.num_classes)
    key_seconds = time.perf_counter() - start
    return {"images": len(images), "seconds": seconds, "peak_mb": peak - before, "kept_mb": after - before,
            "records_mb": sum(getattr(split.records, field.name).nbytes
                              for field in dataclasses.fields(split.records)) / 2**20,
            "key_files": len(files), "key_seconds": key_seconds}


def ram(args: argparse.Namespace) -> dict:
    """--cache ram at this size: fits (not built here) or the one line it refuses with."""
    from detect.data import load_data_config, load_split
    from detect.data.images.ram_cache import available_memory, check_memory
    from detect.errors import UserError
    records = load_split(load_data_config(args.data), "train").records
    try:
        heights, widths = check_memory(records, args.imgsz)
    except UserError as error:
        return {"fits": False, "message": str(error)}
    return {"fits": True, "needed_gib": float((heights * widths * 3).sum()) / 2**30,
            "available_gib": available_memory() / 2**30}


def loader(args: argparse.Namespace) -> dict:
    """RSS of the main process and each worker after the first batch and after `batches`, and the img/s between."""
    from detect.config import load_hyp
    from detect.data import AugmentSettings, TrainLoaderSettings, build_train_loader, load_data_config, load_split
    settings = TrainLoaderSettings(AugmentSettings.from_hyp(load_hyp("scratch-low.yaml")), args.imgsz, args.batch_size,
                                   args.workers, pin_memory=False)
    train = build_train_loader(load_split(load_data_config(args.data), "train"), settings)
    if args.records == "list":  # the old layout, one Python object per image, to compare against
        train.dataset.records = list(train.dataset.records)

    def batches():
        for epoch in itertools.count():
            train.set_epoch(epoch)
            yield from train

    def sizes() -> dict[str, float]:
        return {"main": rss_mb(), **{str(pid): rss_mb(pid) for pid in children()}}

    stream = batches()
    next(stream)
    first_rss = sizes()
    # a worker's heap grows to its working size (mosaic canvases, cv2 buffers) and pages its libraries in over the
    # first few batches, then stays flat (measured: +8% by batch 10, +0.5% from 10 to 200); the copy-on-read growth
    # this checks for is the steady one after that
    for _ in range(args.warmup):
        next(stream)
    start_rss = sizes()
    start = time.perf_counter()
    for _ in range(args.batches):
        next(stream)
    seconds = time.perf_counter() - start
    return {"records": args.records, "batches": args.batches, "batch_size": args.batch_size, "imgsz": args.imgsz,
            "workers": args.workers, "warmup": args.warmup, "images_per_s": args.batches * args.batch_size / seconds,
            "rss_first_mb": first_rss, "rss_start_mb": start_rss, "rss_end_mb": sizes()}


def _detections(records, count: int, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Per image `count` rows [x1, y1, x2, y2, score, class] in pixels: its boxes jittered, then random boxes."""
    from detect.ops.boxes import xywhn_to_xyxy
    found = {}
    for record in records:
        truth = xywhn_to_xyxy(np.asarray(record.boxes, np.float64), record.width, record.height)
        truth = truth + rng.normal(0, 2, truth.shape)
        size = np.array([record.width, record.height] * 2)
        corners = np.sort(rng.uniform(0, 1, (count - len(truth), 2, 2)), axis=1).reshape(-1, 4)
        boxes = np.concatenate([truth, corners * size])[:count]
        classes = np.concatenate([record.classes, rng.integers(0, 80, count)])[:count]
        scores = np.concatenate([rng.uniform(0.3, 1, len(truth)), rng.uniform(0, 0.5, count)])[:count]
        found[record.image_id] = np.c_[boxes, scores, classes]
    return found


def evaluation(args: argparse.Namespace) -> dict:
    """The COCO evaluator stage (loadRes, evaluate, accumulate, summarize) for the val split with both backends."""
    from detect.data import load_data_config, load_split
    from detect.evaluation.evaluator import CocoEvaluator
    split = load_split(load_data_config(args.data), "val")
    records = split.records[:args.eval_images]
    detections = _detections(records, args.detections, np.random.default_rng(0))
    found = {"images": len(records), "detections": sum(len(rows) for rows in detections.values())}
    stats = {}
    for backend in ("pycocotools", "faster-coco-eval"):
        evaluator = CocoEvaluator.from_records(records, split.names, backend)
        for image_id, rows in detections.items():
            evaluator.add(image_id, rows)
        start = time.perf_counter()
        stats[backend] = evaluator.evaluate().stats
        found[f"{backend}_seconds"] = time.perf_counter() - start
    found["stats"] = stats["pycocotools"]
    found["largest_difference"] = float(np.max(np.abs(np.subtract(*stats.values()))))
    return found


def run_phase(name: str, args: argparse.Namespace, *extra: str) -> dict:
    """Run one phase in a fresh process of this script and return what it measured."""
    command = [sys.executable, __file__, "--phase", name, "--data", str(args.data), "--imgsz", str(args.imgsz),
               "--batch-size", str(args.batch_size), "--workers", str(args.workers), "--batches", str(args.batches),
               "--warmup", str(args.warmup),
               "--eval-images", str(args.eval_images), "--detections", str(args.detections), *extra]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def report(name: str, found: dict) -> str:
    """One printed line per phase."""
    if name == "check":
        return (f"check: {found['images']} images in {found['seconds']:.1f} s, {found['images_per_s']:.0f} images/s "
                f"({found['cores']} cores; {found['skipped']} skipped, {found['background']} background)")
    if name == "load":
        return (f"cache load: {found['seconds']:.2f} s, {found['peak_mb']:.0f} MB peak ({found['kept_mb']:.0f} MB kept, "
                f"records {found['records_mb']:.0f} MB); key: {found['key_files']} files stat'ed and hashed in "
                f"{found['key_seconds']:.2f} s")
    if name == "ram":
        return ("--cache ram: " + (found["message"] if not found["fits"] else
                                   f"fits ({found['needed_gib']:.1f} of {found['available_gib']:.1f} GiB)"))
    if name == "loader":
        workers = [pid for pid in found["rss_start_mb"] if pid != "main"]
        lines = [(f"loader ({found['records']} records): {found['images_per_s']:.1f} img/s at {found['imgsz']}, "
                  f"{found['workers']} workers, batch {found['batch_size']}, {found['batches']} batches")]
        for pid in ["main", *workers]:
            first, start = found["rss_first_mb"].get(pid, float("nan")), found["rss_start_mb"][pid]
            end = found["rss_end_mb"].get(pid, float("nan"))
            label = "main" if pid == "main" else f"worker {pid}"
            lines.append(f"  RSS {label}: {first:.0f} MB after batch 1, {start:.0f} MB after the {found['warmup']}-batch "
                         f"warm-up, {end:.0f} MB after {found['batches']} more ({100 * (end - start) / start:+.1f}%)")
        return "\n".join(lines)
    return (f"evaluator, {found['images']} images x {found['detections'] // found['images']} detections: "
            f"pycocotools {found['pycocotools_seconds']:.1f} s, faster-coco-eval {found['faster-coco-eval_seconds']:.1f}"
            f" s; mAP {found['stats'][0]:.4f}, largest difference of the 12 stats {found['largest_difference']:.1e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/work/large/coco118k/data.yaml"))
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=10, help="loader batches before the start RSS")
    parser.add_argument("--eval-images", type=int, default=5000)
    parser.add_argument("--detections", type=int, default=300)
    parser.add_argument("--records", choices=("table", "list"), default="table", help="list: the old layout")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    parser.add_argument("--skip-check", action="store_true", help="keep the label cache (no first check)")
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        measure = {"check": check, "load": load, "ram": ram, "loader": loader, "eval": evaluation}[args.phase]
        print(json.dumps(measure(args)))
        return 0
    if not args.data.is_file():
        print(f"error: {args.data}: no data yaml (make one: python scripts/make_large_dataset.py OUT)", file=sys.stderr)
        return 2
    from detect.backend.cpu import cpu_description  # here: a phase's process measures its own imports

    print(cpu_description())  # what the figures were measured on (docs/benchmarks.md)
    for name in args.phases:
        if name == "check" and args.skip_check:
            continue
        print(report(name, run_phase(name, args, "--records", args.records)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
