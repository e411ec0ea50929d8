"""Validation's traced path with its split in a bucket (scripts/trace_val_path.py; docs/architecture.md,
"Validation's path")."""

from __future__ import annotations

import os

from tests.scripts.test_trace_val_path import MAX_RETURNS, traced_returns
from tests.training.helpers import tiny_dataset


def test_validation_of_a_bucket_split_returns_to_a_module_at_most_the_measured_times(s3_environ, tmp_path):
    data = tiny_dataset(tmp_path / "tiny")
    s3_environ.upload(data.parent, "traced", "tiny")
    yaml = tmp_path / "bucket.yaml"
    yaml.write_text(data.read_text().replace(f"path: {data.parent}", "path: s3://traced/tiny"))
    assert "s3://traced/tiny" in yaml.read_text()
    returns, walk = traced_returns(tmp_path, "--data", str(yaml), environ=dict(os.environ))
    assert returns <= MAX_RETURNS["bucket"] and "data/storage/bucket.py" in walk, walk
    assert s3_environ.gets("traced", "tiny/images/") == 8  # the split was read from the bucket, each image once
