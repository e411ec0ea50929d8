"""Validation's traced path with its split in a bucket (scripts/trace_val_path.py; docs/architecture.md,
"Validation's path")."""

from __future__ import annotations

import os

from tests.scripts.test_trace_val_path import traced_walk
from tests.training.helpers import tiny_dataset


def test_validation_of_a_bucket_split_is_traced_through_the_bucket(s3_environ, tmp_path):
    data = tiny_dataset(tmp_path / "tiny")
    s3_environ.upload(data.parent, "traced", "tiny")
    yaml = tmp_path / "bucket.yaml"
    yaml.write_text(data.read_text().replace(f"path: {data.parent}", "path: s3://traced/tiny"))
    assert "s3://traced/tiny" in yaml.read_text()
    walk = traced_walk(tmp_path, "--data", str(yaml), environ=dict(os.environ))
    assert "data/storage/bucket.py" in walk, walk
    assert s3_environ.gets("traced", "tiny/images/") == 8  # the split was read from the bucket, each image once
