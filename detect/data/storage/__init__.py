"""Where a dataset's bytes come from: one interface (interface.py, Storage) and its implementations, local folders
(local.py) and a bucket (bucket.py, with its client, object cache and fetch-ahead); which files a walk may open
(files.py) and where caches go (cache_places.py). Nothing here knows labels or images."""
