"""yolov5n.pt scored on coco128 in a bucket gives the local copy's mAP; a second val reads no image from the bucket;
a 1-epoch training reads its data from the bucket."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from detect import val
from detect.config import CONFIGS_DIR
from tests.data.helpers import write_sample, write_yaml
from tests.shared_data import COCO128, YOLOV5N, needs_shared
from tests.training.helpers import tiny_dataset, train_args
from tests.training.test_multinode import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def coco128_yaml(yaml: Path, path: str | Path) -> Path:
    """The bundled coco128.yaml with `path` in place of its own, written to `yaml`."""
    text = (CONFIGS_DIR / "data" / "coco128.yaml").read_text().replace("path: ../datasets/coco128", f"path: {path}")
    assert f"path: {path}" in text
    yaml.write_text(text)
    return yaml


@needs_shared
def test_val_from_a_bucket_scores_the_local_copy_and_a_second_val_fetches_no_image(s3_environ, tmp_path,
                                                                                    monkeypatch):
    s3_environ.upload(COCO128, "datasets", "coco128")
    settings = {"weights": str(YOLOV5N), "imgsz": 160, "batch_size": 32, "device": "cpu", "workers": 2,
                "project": str(tmp_path / "runs"), "plots": False}
    local = val.run(data=str(coco128_yaml(tmp_path / "local.yaml", COCO128)), **settings)
    bucket = coco128_yaml(tmp_path / "bucket.yaml", "s3://datasets/coco128")
    images_read = s3_environ.gets("datasets", "coco128/images/")
    first = val.run(data=str(bucket), **settings)
    assert s3_environ.gets("datasets", "coco128/images/") == images_read + 128  # each image once
    assert s3_environ.gets("datasets", "coco128/annotations/") == 1  # val_json: the ground truth with crowd boxes
    assert (first.metrics.map50_95, first.metrics.map50) == (local.metrics.map50_95, local.metrics.map50)
    assert first.images == local.images == 128
    # A second run (a new process: nothing in memory) reads the listing, labels and images from the local caches.
    requests = sum(s3_environ.requests.values())
    second = val.run(data=str(bucket), **settings)
    assert sum(s3_environ.requests.values()) == requests
    assert second.metrics.map50_95 == local.metrics.map50_95


def test_a_one_epoch_training_from_a_bucket_at_two_ranks(s3_environ, tmp_path):
    """torchrun, 2 ranks of one node with a loader worker each: the node checks the labels once and reads each
    image from the bucket once, whichever rank or worker asks first (the disk cache's locks)."""
    data = tiny_dataset(tmp_path / "tiny")
    s3_environ.upload(data.parent, "training", "tiny")
    yaml = tmp_path / "bucket.yaml"
    yaml.write_text(data.read_text().replace(f"path: {data.parent}", "path: s3://training/tiny"))
    assert "s3://training/tiny" in yaml.read_text()
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "detect.train",
         *train_args(yaml, tmp_path / "runs", "--workers", "1", "--cache-dir", str(tmp_path / "cache"), epochs=1)],
        capture_output=True, text=True, env=environ, cwd=REPO, timeout=300, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "train labels: cache written on rank 0; loaded on rank 1" in output
    assert (tmp_path / "runs" / "exp" / "weights" / "last.pt").is_file()
    assert s3_environ.gets("training", "tiny/images/") == 8
    assert s3_environ.gets("training", "tiny/labels/") == 8


def test_on_two_nodes_the_second_fetches_only_the_images_its_rank_trains_on(s3_environ, tmp_path):
    """Two torchrun "nodes" of one rank each, with cache folders of their own: the main rank checks the labels and
    sends its label cache; node 1 then reads no label file and, without mosaic (whose partners come from the whole
    split), only its rank's half of the 16 training images."""
    root = tmp_path / "tiny"
    for index in range(16):
        write_sample(root, "train", f"{index:03d}", 96, 128, [(8 + index, 10, 50 + index, 60), (66, 22, 120, 88)])
    for index in range(4):
        write_sample(root, "val", f"v{index}", 96, 128, [(10, 10, 60, 60)])
    s3_environ.upload(root, "nodes", "tiny")
    yaml = tmp_path / "bucket.yaml"
    yaml.write_text(write_yaml(root, val="images/val").read_text().replace(f"path: {root}", "path: s3://nodes/tiny"))
    hyp = tmp_path / "no_mosaic.yaml"
    hyp.write_text((CONFIGS_DIR / "hyps" / "scratch-low.yaml").read_text().replace("mosaic: 1.0", "mosaic: 0.0"))
    endpoint, environ = f"127.0.0.1:{free_port()}", {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    nodes = []
    for node_rank in (0, 1):
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                   "--node-rank", str(node_rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "-m",
                   "detect.train", *train_args(yaml, tmp_path / f"runs{node_rank}", "--hyp", str(hyp), "--cache-dir",
                                               str(tmp_path / f"cache{node_rank}"), epochs=1)]
        nodes.append(subprocess.Popen(command, env=environ, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
        if node_rank == 0:
            wait_for_port(endpoint, nodes[0])
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(output[-2500:] for output in outputs)
    assert "train labels: cache written on rank 0; loaded on rank 1" in outputs[0]
    fetched = sorted(path.relative_to(tmp_path / "cache1" / "remote" / "objects").parts[2:4]
                     for path in (tmp_path / "cache1" / "remote" / "objects").rglob("*.*"))
    assert [parts for parts in fetched if parts[0] == "labels"] == []
    # its rank's 8 training images, and the next epoch's first batch (2 images), fetched ahead
    assert 8 <= sum(parts == ("images", "train") for parts in fetched) <= 10, fetched
