"""Where a dataset's bytes come from: local folders (local.py) or a bucket (data/remote/), behind one Storage; the
files and folders a walk meets (files.py) and where caches go (places.py). Nothing here knows labels or images."""
