"""A bucket through fsspec's s3fs: the URL forms (s3://, obs://), the endpoint and keys from the usual variables and
files, listing and reading objects, and each failure a user can fix as one line."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from pathlib import Path

from detect.errors import UserError

LOGGER = logging.getLogger(__name__)

# obs:// is Huawei Cloud's OBS, which speaks the S3 API at its own endpoint per region.
SCHEMES = ("s3", "obs")
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # botocore's names, the service's first
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
CREDENTIAL_VARIABLES = {"key": "AWS_ACCESS_KEY_ID", "secret": "AWS_SECRET_ACCESS_KEY", "token": "AWS_SESSION_TOKEN",
                        "profile": "AWS_PROFILE"}
OBS_ENDPOINT = "https://obs.{region}.myhuaweicloud.com"  # OBS's region endpoint (docs/data.md, "Object storage")
# s3fs tries a failing call 5 times, botocore each of those up to 5 times: a few of each name an unreachable
# endpoint in seconds, and still ride out a dropped connection.
ATTEMPTS = 3
CONNECT_TIMEOUT = 5  # seconds
KEYS_HINT = "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or ~/.aws/credentials, AWS_PROFILE)"
ACCESS_CODES = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken")


def _first_variable(names: tuple[str, ...]) -> str | None:
    return next((os.environ[name] for name in names if os.environ.get(name)), None)


def endpoint_for(scheme: str, url: str = "") -> str | None:
    """AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL; for obs:// without them, OBS's endpoint in AWS_REGION (or
    AWS_DEFAULT_REGION); None for s3:// leaves it to botocore (AWS, or `endpoint_url` in ~/.aws/config)."""
    endpoint = _first_variable(ENDPOINT_VARIABLES)
    if endpoint or scheme != "obs":
        return endpoint
    region = _first_variable(REGION_VARIABLES)
    if region is None:
        raise UserError(f"{url or 'obs://'}: set AWS_ENDPOINT_URL to your OBS endpoint (https://obs.<region>.myhuaweicloud.com) "
                        "or AWS_DEFAULT_REGION to its region (cn-north-4, ...)")
    return OBS_ENDPOINT.format(region=region)


@dataclasses.dataclass(frozen=True)
class Bucket:
    """One bucket at one endpoint (None: botocore's own choice); its client is made in each process that uses it."""

    scheme: str
    name: str
    endpoint: str | None

    @classmethod
    def of(cls, url: str) -> tuple[Bucket, str]:
        """(bucket, key) of s3://bucket/key or obs://bucket/key (the key without slashes at its ends)."""
        scheme, _, rest = url.partition("://")
        name, _, key = rest.partition("/")
        if scheme not in SCHEMES or not name:
            raise UserError(f"{url}: not a bucket URL (s3://bucket/prefix or obs://bucket/prefix)")
        return cls(scheme, name, endpoint_for(scheme, url)), key.strip("/")

    @property
    def folder_name(self) -> str:
        """The bucket's folder in the cache: its scheme and name, and a hash of its endpoint (one bucket name may exist
        at several endpoints)."""
        endpoint = hashlib.sha256(f"{self.scheme}|{self.endpoint}|{self.name}".encode()).hexdigest()[:8]
        return f"{self.scheme}-{self.name}-{endpoint}"

    def url(self, key: str = "") -> str:
        """scheme://bucket/key."""
        return f"{self.scheme}://{self.name}/{key}"

    @property
    def where(self) -> str:
        """The endpoint in words, for messages."""
        return self.endpoint or "the endpoint botocore picks (AWS, or endpoint_url in ~/.aws/config)"

    def filesystem(self):
        """s3fs's client for this endpoint (fsspec keeps one per process and argument set: a forked loader worker
        makes its own)."""
        try:
            import s3fs  # optional: the `s3` extra
        except ImportError:
            raise UserError(f"{self.url()}: reading a bucket needs s3fs: pip install 'detect-trainer[s3]'") from None
        config: dict = {"connect_timeout": CONNECT_TIMEOUT, "retries": {"max_attempts": ATTEMPTS}}
        if self.scheme == "obs":  # OBS answers at bucket.endpoint (its bucket domain names)
            config["s3"] = {"addressing_style": "virtual"}
        # The keys are passed as the variables give them (None: botocore's chain, ~/.aws included), so that fsspec's
        # cache of clients, keyed by these arguments, never hands out one made with other keys.
        keys = {argument: os.environ.get(name) for argument, name in CREDENTIAL_VARIABLES.items()}
        filesystem = s3fs.S3FileSystem(endpoint_url=self.endpoint, config_kwargs=config, **keys)
        filesystem.retries = ATTEMPTS
        return filesystem

    def list(self, prefix: str) -> dict[str, tuple[int, int]]:
        """{key: (size, last modified in ns)} of every object under `prefix` (a folder, or one object)."""
        try:
            found = self.filesystem().find(f"{self.name}/{prefix}", detail=True)
        except Exception as error:  # noqa: BLE001 (botocore and aiohttp raise many types; each becomes one line)
            raise self.failure(prefix, error) from None
        start = len(self.name) + 1
        objects = {path[start:]: (int(info["size"]), int(info["LastModified"].timestamp() * 1e9))
                   for path, info in found.items() if info.get("type") == "file"}
        # A key is a local path below the mirror folder: one with a '..', '.' or empty part (legal in S3) could name
        # a file outside it, so it is skipped, counted and named.
        unsafe = sorted(key for key in objects if {"", ".", ".."} & set(key.split("/")))
        if unsafe:
            LOGGER.warning("%s: %d object(s) skipped, their keys have a '..', '.' or empty part, the first: %r",
                           self.url(prefix), len(unsafe), unsafe[0])
        return {key: value for key, value in objects.items() if key not in unsafe}

    def read(self, key: str) -> bytes:
        """The object's bytes; FileNotFoundError for an object that is not there (the caller names it), a UserError
        naming what to fix for anything else."""
        try:
            return self.filesystem().cat_file(f"{self.name}/{key}")
        except Exception as error:  # noqa: BLE001 (as in list)
            failure = self.failure(key, error)
            if isinstance(error, FileNotFoundError) and "no such object" in str(failure):
                raise FileNotFoundError(f"{self.url(key)}: no such object") from None
            raise failure from None

    def failure(self, key: str, error: Exception) -> UserError:
        """One line for a failed call on `key`: wrong keys, a missing bucket or object, an unreachable endpoint (s3fs
        gives S3's answers as PermissionError and FileNotFoundError, botocore a failed connection as
        EndpointConnectionError)."""
        text, url = " ".join(str(error).split()), self.url(key)
        if isinstance(error, PermissionError) or any(code in text for code in ACCESS_CODES):
            return UserError(f"{url}: access denied at {self.where} ({text[:120]}): {KEYS_HINT}")
        if "NoSuchBucket" in text or "bucket does not exist" in text:
            return UserError(f"{url}: no bucket '{self.name}' at {self.where} (check the data yaml's 'path' and "
                             "AWS_ENDPOINT_URL)")
        if isinstance(error, FileNotFoundError):
            return UserError(f"{url}: no such object at {self.where}")
        if "Connect" in type(error).__name__ or isinstance(error, ConnectionError | TimeoutError):
            return UserError(f"{url}: cannot reach {self.where} ({type(error).__name__}); check AWS_ENDPOINT_URL and "
                             "the network")
        return UserError(f"{url}: {type(error).__name__}: {text[:200]}")

def mirror_folder(url: str, cache_home: Path) -> Path:
    """Where the files under bucket URL `url` are kept in cache folder `cache_home`: remote/objects/<bucket>/<key>."""
    bucket, key = Bucket.of(url)
    return cache_home / "remote" / "objects" / bucket.folder_name / key
