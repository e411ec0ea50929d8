"""An S3 server on 127.0.0.1 for the session: moto's, with IAM keys checked (a wrong key is refused as S3 would), and
a count of the requests it answers, so that a test can say what a step read from the bucket."""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the dev extra")
boto3 = pytest.importorskip("boto3")
pytest.importorskip("s3fs", reason="s3fs is in the s3 and dev extras")
from moto import settings as moto_settings
from moto.core.authorization import ActionAuthenticatorMixin

REGION = "us-east-1"


@dataclasses.dataclass
class S3Server:
    """The server's endpoint, a working key pair, and the requests answered so far as (method, path) counts."""

    endpoint: str
    key: str
    secret: str
    requests: collections.Counter
    lock: threading.Lock

    def environ(self) -> dict[str, str]:
        """The variables a user sets to reach this server (and no profile or config file of the developer's)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_DEFAULT_REGION": REGION, "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE":
                "/nonexistent"}

    def client(self):
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.key,
                            aws_secret_access_key=self.secret, region_name=REGION)

    def upload(self, folder: Path, bucket: str, prefix: str) -> None:
        """Every file under `folder` into s3://bucket/prefix/ (the bucket made if new)."""
        client = self.client()
        if bucket not in {entry["Name"] for entry in client.list_buckets().get("Buckets", [])}:
            client.create_bucket(Bucket=bucket)
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")

    def gets(self, bucket: str, under: str = "") -> int:
        """Object reads (GET of a key, not a listing) answered so far under s3://bucket/under."""
        with self.lock:
            return sum(count for (method, path), count in self.requests.items()
                       if method == "GET" and path.startswith(f"/{bucket}/{under}") and path != f"/{bucket}/")

    def lists(self, bucket: str) -> int:
        """Listings (GET of the bucket with list-type) answered so far."""
        with self.lock:
            return sum(count for (method, path), count in self.requests.items()
                       if method == "GET" and path in (f"/{bucket}", f"/{bucket}/"))


def _counting(app, requests: collections.Counter, lock: threading.Lock):
    def counted(environ, start_response):
        with lock:
            requests[(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""))] += 1
        return app(environ, start_response)
    return counted


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's server on a free port of 127.0.0.1; IAM user `detect` holds the key pair, then every request is
    authenticated (moto's reset-auth: no more unauthenticated calls)."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    requests, lock = collections.Counter(), threading.Lock()
    server._server.app = _counting(server._server.app, requests, lock)  # werkzeug's server calls self.app
    iam = boto3.client("iam", endpoint_url=endpoint, aws_access_key_id="setup", aws_secret_access_key="setup",
                       region_name=REGION)
    iam.create_user(UserName="detect")
    iam.put_user_policy(UserName="detect", PolicyName="all", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    made = iam.create_access_key(UserName="detect")["AccessKey"]
    no_auth = moto_settings.INITIAL_NO_AUTH_ACTION_COUNT
    moto_settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count = 0, 0  # as reset-auth does
    try:
        yield S3Server(endpoint, made["AccessKeyId"], made["SecretAccessKey"], requests, lock)
    finally:
        moto_settings.INITIAL_NO_AUTH_ACTION_COUNT = no_auth
        server.stop()


@pytest.fixture
def s3_environ(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The server's variables set for this test (and the processes it starts)."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.environ().items():
        monkeypatch.setenv(name, value)
    return s3_server
