"""A bucket seen as a local folder: its mirror folder in the cache folder, whose files are fetched on first read
through the disk cache (object_cache.py); the bucket's listing, kept locally for a while; a split's images listed
from it, their listed sizes and times for the label cache's key, and the label check of files fetched as it goes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from detect.atomic_file import replacing
from detect.data.data_config import DataConfig, user_cache
from detect.data.images.files import Listing
from detect.data.labels import check
from detect.data.labels.cache import CACHE_DIR_VARIABLE
from detect.data.labels.checked import CheckedImages
from detect.data.records import IMAGE_SUFFIXES
from detect.data.remote.object_cache import ObjectCache, limit_bytes
from detect.data.remote.store import Bucket, mirror_folder
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)

LISTING_TTL_VARIABLE = "DETECT_REMOTE_LISTING_TTL"
# Seconds a listing is reused: the ranks of a job, and its later val, list the bucket once; a bucket changed since
# is seen by the next run after this (0: list on every start).
DEFAULT_LISTING_TTL = 600
# Objects fetched and checked at once by the label check: a bucket's latency (tens of ms) is hidden behind this many
# requests in flight, while the check's own work (about 1 ms an image, docs/scale.md) stays the limit.
CHECK_THREADS = 32

# The mirror folders of the buckets in use (with a trailing separator) -> their mount. attach fills it before any
# loader starts; forked loader workers inherit it, so read_image finds a bucket's files in every process (and, while
# it is empty, asks nothing more of this module).
MOUNTS: dict[str, Mount] = {}


def cache_home(cache_dir: str | Path | None = None) -> Path:
    """The cache folder: --cache-dir, else $DETECT_CACHE_DIR, else the user cache (data_config.user_cache)."""
    return Path(cache_dir or os.environ.get(CACHE_DIR_VARIABLE) or user_cache()).expanduser().absolute()


def _listing_ttl() -> float:
    text = os.environ.get(LISTING_TTL_VARIABLE) or str(DEFAULT_LISTING_TTL)
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{LISTING_TTL_VARIABLE}={text}: give the seconds a bucket's listing is reused") from None


def _is_image(key: str) -> bool:
    return os.path.splitext(key)[1].lower() in IMAGE_SUFFIXES


@dataclasses.dataclass(eq=False)
class Mount:
    """One bucket: its files at `folder` + key, fetched into `cache`; listings and label caches in `meta`."""

    bucket: Bucket
    cache: ObjectCache
    folder: str
    meta: Path
    listings: dict[str, dict[str, tuple[int, int]]] = dataclasses.field(default_factory=dict)

    def key(self, path: str | os.PathLike) -> str:
        """The object key of a path in the mirror folder."""
        return os.path.normpath(os.fspath(path))[len(self.folder):]

    def fetch(self, key: str) -> str:
        """The local path of object `key`, fetched if the cache does not hold it."""
        return self.cache.fetch(f"{self.bucket.folder_name}/{key}", lambda: self.bucket.read(key))

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

    def list_images(self, source: Path, root: str, read_list: Callable[[Path], Listing]) -> Listing:
        """The images of split source `source` (a folder, a .txt list of paths or one image under data root key
        `root`), from the listing of `root` (or of the source itself when it lies outside)."""
        key = self.key(source)
        objects = self.listing(root if key == root or key.startswith(f"{root}/") or not root else key)
        if key in objects and key.endswith(".txt"):
            return read_list(Path(self.fetch(key)))
        if key in objects and _is_image(key):
            return Listing([os.path.normpath(source)])
        inside = f"{key}/" if key else ""
        found = sorted((name for name in objects if name.startswith(inside) and _is_image(name)),
                       key=lambda name: name.split("/"))  # a walk's order: each folder's entries by name
        if not found:
            raise UserError(f"{self.bucket.url(key)}: no such image folder or image list in the bucket (check 'path' "
                            "and the split in the data yaml)")
        return Listing([self.folder + name for name in found])

    def listed(self, paths: Sequence[str]) -> dict[str, tuple[int, int]]:
        """{key: (size, modified ns)} of the listed objects among `paths`."""
        objects: dict[str, tuple[int, int]] = {}
        for listing in self.listings.values():
            objects.update(listing)
        keys = [self.key(path) for path in paths]
        return {key: objects[key] for key in keys if key in objects}

    def file_stats(self, paths: Sequence[str]) -> np.ndarray:
        """(n, 2) int64 [size, modified ns] of each path's object as listed ([-1, -1]: not in the bucket), the label
        cache's key; a local copy of another size or older than its object is dropped, to be fetched again."""
        listed = self.listed(paths)
        stats = np.full((len(paths), 2), -1, np.int64)
        for index, path in enumerate(paths):
            found = listed.get(self.key(path))
            if found is None:
                continue
            stats[index] = found
            try:
                local = os.stat(path)
            except OSError:
                continue
            if local.st_size != found[0] or local.st_mtime_ns < found[1]:
                LOGGER.info("%s: changed in the bucket, fetched again", path)
                Path(path).unlink(missing_ok=True)
        return stats

    def check_images(self, images: list[str], labels: list[str | None], given: list, num_classes: int,
                     bounds: check.ImageBounds) -> CheckedImages:
        """check.check_image of every image and its label file, each fetched first (a label file the bucket does not
        hold is a missing one), CHECK_THREADS at a time."""
        listed = self.listed([label for label in labels if label is not None])

        def check_one(index: int) -> check.CheckResult:
            label = labels[index]
            label = label if label is not None and self.key(label) in listed else None
            for path in (images[index], label):
                if path is not None:
                    try:
                        self.fetch(self.key(path))
                    except FileNotFoundError:
                        pass  # deleted since the listing: the check names the missing file
            return check.check_image(images[index], label, num_classes, given[index], bounds)

        with ThreadPoolExecutor(CHECK_THREADS) as pool:
            return CheckedImages.from_results(list(pool.map(check_one, range(len(images)))))


def attach(config: DataConfig, cache_dir: str | Path | None = None) -> tuple[DataConfig, Mount]:
    """The bucket of `config` (path: s3://...) mounted in the cache folder (cache_home), and the config with its root
    and splits moved there; from here on read_image fetches its files in every process."""
    home = cache_home(cache_dir)
    root = mirror_folder(config.remote, home)
    bucket, _ = Bucket.of(config.remote)
    folder = os.path.join(home, "remote", "objects", bucket.folder_name, "")
    mount = MOUNTS.get(folder)
    if mount is None:
        meta = home / "remote" / "meta" / bucket.folder_name
        try:
            meta.mkdir(parents=True, exist_ok=True)
            cache = ObjectCache(home / "remote", limit_bytes())
        except OSError as error:
            raise UserError(f"{config.remote}: cannot keep its files in {home / 'remote'} ({error.strerror or error}); "
                            f"--cache-dir or ${CACHE_DIR_VARIABLE} can name a writable folder") from None
        mount = MOUNTS[folder] = Mount(bucket, cache, folder, meta)
    if root != config.root:
        splits = {split: tuple(root / path.relative_to(config.root) for path in paths)
                  for split, paths in config.splits.items()}
        json_files = {split: root / path.relative_to(config.root) for split, path in config.json_files.items()}
        config = dataclasses.replace(config, root=root, splits=splits, json_files=json_files)
    return config, mount


def keep_label_cache(config: DataConfig, cache_dir: str | Path | None, name: str, contents: bytes) -> None:
    """Write label cache `name`, checked on another node, into this node's meta folder of the bucket of `config`,
    where load_split finds it (its name and key hold object keys, not the cache folder's path). Atomic: the other
    ranks of the node may be reading; a failed write is a warning, and this node checks the labels itself."""
    _, mount = attach(config, cache_dir)
    target = mount.meta / Path(name).name
    try:
        with replacing(target) as temporary:
            temporary.write_bytes(contents)
    except OSError as error:
        LOGGER.warning("%s: cannot keep the label cache another node sent (%s); this node checks the labels itself",
                       target, error.strerror or error)


def fetch_if_mounted(path: str | os.PathLike) -> None:
    """Fetch `path` into the disk cache when it lies in a mounted bucket's mirror folder and is not there yet (a
    file there is marked used); nothing for any other path."""
    text = os.fspath(path)
    for folder, mount in MOUNTS.items():
        if text.startswith(folder):
            mount.fetch(mount.key(text))
            return
