"""A bucket (s3://, obs://) as a dataset's storage (the interface: interface.py): its mirror folder in the cache
folder, whose files are fetched on first read from the bucket's client (bucket_client.py) through the disk cache
(object_cache.py); the bucket's listing, kept locally for a while; a split's images listed from it, their listed
sizes and times for the label cache's key, its label cache kept by object keys; the label check and the loader's
workers fetch as they go (fetch_ahead.py)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from detect.atomic_file import make_folder, remove_file, replacing
from detect.data.storage.bucket_client import Bucket
from detect.data.storage.cache_places import CACHE_DIR_VARIABLE, relocated
from detect.data.storage.fetch_ahead import FetchAhead
from detect.data.storage.files import Listing, is_image
from detect.data.storage.interface import Storage
from detect.data.storage.local import listed_images
from detect.data.storage.object_cache import ObjectCache, limit_bytes
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)

LISTING_TTL_VARIABLE = "DETECT_REMOTE_LISTING_TTL"
# Seconds a listing is reused: the ranks of a job, and its later val, list the bucket once; a bucket changed since
# is seen by the next run after this (0: list on every start).
DEFAULT_LISTING_TTL = 600


def _listing_ttl() -> float:
    text = os.environ.get(LISTING_TTL_VARIABLE) or str(DEFAULT_LISTING_TTL)
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{LISTING_TTL_VARIABLE}={text}: give the seconds a bucket's listing is reused") from None


class BucketStorage(Storage):
    """One bucket: its files at `folder` + key, fetched into the object cache of cache folder `home`; listings and
    label caches in its meta folder. `root` is the data root's key, whose listing serves the splits under it."""

    # Objects fetched and checked at once by the label check: a bucket's latency (tens of ms) is hidden behind this
    # many requests in flight, while the check's own work (about 1 ms an image, docs/scale.md) stays the limit.
    check_threads = 32
    check_once_per_job = True

    def __init__(self, url: str, home: Path) -> None:
        self.bucket, self.root = Bucket.of(url)
        self.folder = os.path.join(home, "remote", "objects", self.bucket.folder_name, "")
        self.meta = home / "remote" / "meta" / self.bucket.folder_name
        try:
            make_folder(self.meta)
            self.cache = ObjectCache(home / "remote", limit_bytes())
        except OSError as error:
            raise UserError(f"{url}: cannot keep its files in {home / 'remote'} ({error.strerror or error}); "
                            f"--cache-dir or ${CACHE_DIR_VARIABLE} can name a writable folder") from None
        self.listings: dict[str, dict[str, tuple[int, int]]] = {}

    def key(self, path: str | os.PathLike) -> str | None:
        """The object key of a path in the mirror folder; None for a path outside it."""
        text = os.path.normpath(os.fspath(path))
        return text[len(self.folder):] if text.startswith(self.folder) else None

    def fetch(self, path: str | os.PathLike) -> None:
        """Fetch `path`'s object into the cache unless it is there (then it is marked used); FileNotFoundError for an
        object the bucket lacks; nothing for a path outside the mirror folder."""
        key = self.key(path)
        if key is not None:
            self.cache.fetch(f"{self.bucket.folder_name}/{key}", lambda: self.bucket.read(key))

    def holds(self, path: str | os.PathLike) -> bool:
        key = self.key(path)
        return key is None or key in self._listed()

    def fetch_tree(self, path: str | os.PathLike) -> None:
        key = self.key(path)
        if key is None:
            return
        for name in self._listing_of(key):
            if name == key or name.startswith(f"{key}/"):
                self.fetch(self.folder + name)

    def _listing_of(self, key: str) -> dict[str, tuple[int, int]]:
        """The listing that holds `key`: the data root's, or the key's own when it lies outside the root."""
        inside_root = not self.root or key == self.root or key.startswith(f"{self.root}/")
        return self.listing(self.root if inside_root else key)

    def listing(self, prefix: str) -> dict[str, tuple[int, int]]:
        """{key: (size, modified ns)} under `prefix`: from this process's memory, the meta folder's copy if it is
        younger than $DETECT_REMOTE_LISTING_TTL, else the bucket (and the copy written)."""
        if prefix in self.listings:
            return self.listings[prefix]
        stored = self.meta / f"listing-{hashlib.sha256(prefix.encode()).hexdigest()[:16]}.json"
        objects = None
        try:
            if time.time() - stored.stat().st_mtime < _listing_ttl():
                saved = json.loads(stored.read_text())
                objects = {key: tuple(value) for key, value in saved["objects"].items()} if saved["prefix"] == prefix else None
        except (OSError, ValueError, KeyError, TypeError):
            objects = None  # missing, old or unreadable: list again
        if objects is None:
            started = time.perf_counter()
            objects = self.bucket.list(prefix)
            LOGGER.info("%s: %d objects listed in %.1f s", self.bucket.url(prefix), len(objects),
                        time.perf_counter() - started)
            with replacing(stored) as temporary:
                temporary.write_text(json.dumps({"prefix": prefix, "objects": objects}))
        self.listings[prefix] = objects
        return objects

    def list_images(self, source: Path) -> Listing:
        """The images of split source `source` (a folder, a .txt list of paths or one image), from the listing of
        the data root (or of the source itself when it lies outside)."""
        key = self.key(source) or ""
        objects = self._listing_of(key)
        if key in objects and key.endswith(".txt"):
            self.fetch(source)
            return Listing(listed_images(source))
        if key in objects and is_image(key):
            return Listing([os.path.normpath(source)])
        inside = f"{key}/" if key else ""
        found = sorted((name for name in objects if name.startswith(inside) and is_image(name)),
                       key=lambda name: name.split("/"))  # a walk's order: each folder's entries by name
        if not found:
            raise UserError(f"{self.bucket.url(key)}: no such image folder or image list in the bucket (check 'path' "
                            "and the split in the data yaml)")
        return Listing([self.folder + name for name in found])

    def _listed(self) -> dict[str, tuple[int, int]]:
        objects: dict[str, tuple[int, int]] = {}
        for listing in self.listings.values():
            objects.update(listing)
        return objects

    def key_of(self, paths: Sequence[str]) -> tuple[list[str], np.ndarray]:
        """Object keys, and each one's (size, modified ns) as listed ([-1, -1]: not in the bucket); a local copy of
        another size or older than its object is dropped, to be fetched again."""
        listed, keys = self._listed(), [self.key(path) or path for path in paths]
        stats = np.full((len(paths), 2), -1, np.int64)
        for index, (path, key) in enumerate(zip(paths, keys)):
            found = listed.get(key)
            if found is None:
                continue
            stats[index] = found
            try:
                local = os.stat(path)
            except OSError:
                continue
            if local.st_size != found[0] or local.st_mtime_ns < found[1]:
                LOGGER.info("%s: changed in the bucket, fetched again", path)
                remove_file(path, cache=True)  # the local copy of an object: the split's images are these copies
        return keys, stats

    def cache_file(self, usual: Path, cache_dir: str | Path | None) -> Path:
        """In the meta folder, named by object keys, not by the cache folder: a node that is sent this cache finds
        it its own (keep_label_cache)."""
        key = self.key(usual)
        return relocated(Path(key or usual), self.meta)

    def keep_label_cache(self, name: str, contents: bytes) -> None:
        """Write label cache `name`, checked on another node, where this node's load_split finds it. Atomic: the
        other ranks of the node may be reading; a failed write is a warning, and this node checks the labels
        itself."""
        target = self.meta / Path(name).name
        try:
            with replacing(target) as temporary:
                temporary.write_bytes(contents)
        except OSError as error:
            LOGGER.warning("%s: cannot keep the label cache another node sent (%s); this node checks the labels "
                           "itself", target, error.strerror or error)

    def loader_dataset(self, dataset: Dataset, batches: Callable[[int], list[list[int]]]) -> Dataset:
        return FetchAhead(dataset, batches, self.fetch)
