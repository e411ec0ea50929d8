"""Loader throughput (images/s) of mosaic training batches read from a bucket against the same folder on local disk.

The bucket is moto's S3 server on 127.0.0.1 (moto[server] is in the dev extra), with an optional delay added to every
request to stand in for a real bucket's latency. Each row: the label check (listing, fetching every image and label
the first time), then two epochs in a row over the split with the disk cache emptied before: the first reads every
image from the bucket, the second from the disk cache.

Usage: python scripts/bench_remote_data.py --folder ../datasets/coco128 --imgsz 320 --workers 2 --latency-ms 0 30
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import boto3
import yaml
from moto.server import ThreadedMotoServer

from detect.config import load_hyp
from detect.data import AugmentSettings, TrainLoaderSettings, build_train_loader, load_data_config, load_split
from detect.data import loader as loader_module

KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


def start_server(latency: dict) -> str:
    """moto's server on a free port; every request waits latency["seconds"] first. Its endpoint URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    app = server._server.app  # werkzeug's server calls self.app for each request

    def delayed(environ, start_response):
        time.sleep(latency["seconds"])
        return app(environ, start_response)

    server._server.app = delayed
    host, port = server.get_host_and_port()
    return f"http://{host}:{port}"


def upload(folder: Path, endpoint: str) -> None:
    """Every image and label file of `folder` into s3://bench/data/."""
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket="bench")
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.parts[len(folder.parts)] in ("images", "labels"):
            client.upload_file(str(path), "bench", f"data/{path.relative_to(folder).as_posix()}")


def epochs(data: Path, args: argparse.Namespace, cache_dir: Path) -> tuple[float, float, float]:
    """(label check seconds, first epoch images/s, second epoch images/s) of a fresh loader over `data`."""
    config = load_data_config(data)
    start = time.perf_counter()
    checked = load_split(config, "train", cache_dir=cache_dir)
    check = time.perf_counter() - start
    # The check fetched every image: empty the disk cache, so that the first epoch reads them from the bucket (as on a
    # node whose cache is cold, the label cache found).
    shutil.rmtree(cache_dir / "remote" / "objects", ignore_errors=True)
    (cache_dir / "remote" / "usage").unlink(missing_ok=True)
    augmentation = AugmentSettings.from_hyp(load_hyp(args.hyp))
    loader = build_train_loader(checked,
                                TrainLoaderSettings(augmentation, args.imgsz, args.batch_size, args.workers, seed=0,
                                                    pin_memory=False, cache_dir=cache_dir))
    rates = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        start = time.perf_counter()
        images = sum(len(batch.images) for batch in loader)
        rates.append(images / (time.perf_counter() - start))
    return check, *rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True, help="a yolov5 dataset folder (images/, labels/)")
    parser.add_argument("--split", default="images/train2017")
    parser.add_argument("--hyp", default="scratch-low.yaml")
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 30.0])
    args = parser.parse_args(argv)
    os.environ.update(KEYS)
    latency = {"seconds": 0.0}
    endpoint = start_server(latency)
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    upload(args.folder.resolve(), endpoint)
    work = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    names = {index: str(index) for index in range(80)}
    local, bucket = work / "local.yaml", work / "bucket.yaml"
    local.write_text(yaml.safe_dump({"path": str(args.folder.resolve()), "train": args.split, "val": args.split,
                                     "names": names}))
    bucket.write_text(yaml.safe_dump({"path": "s3://bench/data", "train": args.split, "val": args.split,
                                      "names": names}))
    print("| data | request delay | label check, s | epoch 1, img/s | epoch 2, img/s |\n|---|---|---|---|---|")
    row = "| {} | {} | {:.1f} | {:.1f} | {:.1f} |"
    print(row.format("local disk", "-", *epochs(local, args, work / "local-cache")), flush=True)
    fetch_ahead = loader_module.FetchAhead
    for milliseconds in args.latency_ms:
        latency["seconds"] = milliseconds / 1000
        for ahead in (True, False):
            loader_module.FetchAhead = fetch_ahead if ahead else (lambda dataset, batches: dataset)
            name = "bucket" + ("" if ahead else ", no fetch-ahead")
            cache_dir = work / f"cache-{milliseconds:g}-{ahead}"  # a cold disk cache for each row
            print(row.format(name, f"{milliseconds:g} ms", *epochs(bucket, args, cache_dir)), flush=True)
    loader_module.FetchAhead = fetch_ahead
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
