"""Bucket URLs and endpoints: obs:// is OBS's S3 API at its region's endpoint, reached at bucket domain names."""

from __future__ import annotations

import pytest

from detect.data import load_data_config
from detect.data.storage.bucket_client import Bucket
from detect.errors import UserError


@pytest.fixture
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_obs_takes_its_endpoint_from_the_region_or_the_endpoint_variable(no_endpoint):
    with pytest.raises(UserError, match=r"obs://data/coco: set AWS_ENDPOINT_URL to your OBS endpoint \(https://obs.<region>"):
        Bucket.of("obs://data/coco")
    no_endpoint.setenv("AWS_DEFAULT_REGION", "cn-north-4")
    bucket, key = Bucket.of("obs://data/coco/")
    assert (bucket.scheme, bucket.name, bucket.endpoint, key) == ("obs", "data", "https://obs.cn-north-4.myhuaweicloud.com",
                                                                  "coco")
    assert bucket.filesystem().config_kwargs["s3"] == {"addressing_style": "virtual"}
    no_endpoint.setenv("AWS_ENDPOINT_URL", "https://obs.ap-southeast-1.myhuaweicloud.com")
    assert Bucket.of("obs://data/coco")[0].endpoint == "https://obs.ap-southeast-1.myhuaweicloud.com"
    # s3:// without a variable leaves the endpoint to botocore (AWS, or endpoint_url in ~/.aws/config)
    no_endpoint.delenv("AWS_ENDPOINT_URL")
    assert Bucket.of("s3://data")[0].endpoint is None
    assert Bucket.of("obs://data")[0].folder_name != Bucket.of("s3://data")[0].folder_name


@pytest.mark.parametrize("path", ["s3:/data", "gs://data/x", "/data/s3://x", "data"])
def test_only_bucket_urls_are_remote(path, tmp_path):
    yaml = tmp_path / "data.yaml"
    yaml.write_text(f"path: {path}\ntrain: images\nval: images\nnames: [a]\n")
    assert load_data_config(yaml).remote is None
    yaml.write_text("path: s3://data/x/\ntrain: images\nval: images\nnames: [a]\n")
    assert load_data_config(yaml).remote == "s3://data/x/"


def test_a_url_without_a_bucket_is_one_line():
    with pytest.raises(UserError, match="s3://: not a bucket URL"):
        Bucket.of("s3://")


def test_keys_that_would_leave_the_mirror_folder_are_skipped_by_name(s3_environ, caplog):
    client = s3_environ.client()
    client.create_bucket(Bucket="hostile")
    for key in ("data/images/a.jpg", "data/images/../../../escape.jpg", "data/images//b.jpg", "data/./c.jpg"):
        client.put_object(Bucket="hostile", Key=key, Body=b"x")
    bucket, prefix = Bucket.of("s3://hostile/data")
    assert list(bucket.list(prefix)) == ["data/images/a.jpg"]
    assert "3 object(s) skipped, their keys have a '..', '.' or empty part, the first: 'data/./c.jpg'" in caplog.text
