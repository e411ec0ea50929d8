"""The disk cache of a bucket's files: a second read fetches nothing, one object is fetched once however many
threads ask for it at once, and past the size limit the least recently used files go first."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from detect.data.storage.object_cache import LIMIT_VARIABLE, LOW_WATER, ObjectCache, limit_bytes
from detect.errors import UserError


class CountingReads:
    """read functions for the cache that count the fetches of each name."""

    def __init__(self) -> None:
        self.fetched: list[str] = []
        self.lock = threading.Lock()

    def of(self, name: str, size: int = 100, wait: float = 0.0):
        def read() -> bytes:
            time.sleep(wait)
            with self.lock:
                self.fetched.append(name)
            return name.encode()[:1] * size
        return read


def test_a_second_read_fetches_nothing_and_one_object_is_fetched_once(tmp_path: Path):
    cache, reads = ObjectCache(tmp_path, limit=10_000), CountingReads()
    path = cache.fetch("bucket/a/x.jpg", reads.of("x"))
    assert Path(path).read_bytes() == b"x" * 100 and path == str(tmp_path / "objects" / "bucket/a/x.jpg")
    assert cache.fetch("bucket/a/x.jpg", reads.of("x")) == path
    # Eight workers after one new object at once: one fetch, the others wait for it and use it.
    threads = [threading.Thread(target=cache.fetch, args=("bucket/a/y.jpg", reads.of("y", wait=0.05)))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert reads.fetched == ["x", "y"]
    assert int((tmp_path / "usage").read_text()) == 200
    assert not [name for name in os.listdir(tmp_path / "objects" / "bucket" / "a") if name.endswith(".tmp")]


def test_past_the_limit_the_least_recently_used_files_are_evicted(tmp_path: Path):
    cache, reads = ObjectCache(tmp_path, limit=300), CountingReads()
    for name in "abc":
        cache.fetch(name, reads.of(name))
    cache.fetch("a", reads.of("a"))  # used again: now the most recent of the three
    cache.fetch("d", reads.of("d"))  # 400 bytes: down to LOW_WATER of 300, the oldest first (b, then c)
    kept = sorted(os.listdir(tmp_path / "objects"))
    assert kept == ["a", "d"] and LOW_WATER * 300 >= 200
    assert int((tmp_path / "usage").read_text()) == 200
    cache.fetch("b", reads.of("b"))  # evicted: fetched again
    assert reads.fetched == ["a", "b", "c", "d", "b"]


@pytest.mark.parametrize("value", ["0", "-1", "lots"])
def test_a_bad_size_limit_is_one_line(value, monkeypatch):
    monkeypatch.setenv(LIMIT_VARIABLE, value)
    with pytest.raises(UserError, match=f"{LIMIT_VARIABLE}={value}: give the disk cache's size limit in GB"):
        limit_bytes()
    monkeypatch.setenv(LIMIT_VARIABLE, "0.5")
    assert limit_bytes() == 2**29
