"""Datasets in object storage (S3, Huawei OBS, MinIO), read in place: `path: s3://bucket/prefix` in a data yaml. The
bucket is a Storage (bucket.py): listed once into a local mirror folder, whose files are fetched on first read through
a disk cache with a size limit (object_cache.py); the label check, its cache and the loaders then see local paths."""
