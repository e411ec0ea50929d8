"""The dataset yaml (yolov5 layout plus optional COCO json label sources and labelling tools' files), loaded strictly
and resolved."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from detect.config import CONFIGS_DIR, from_mapping, read_yaml, resolve_config
from detect.data.annotations.formats import AnnotationSource, annotation_source, names_of
from detect.data.storage.bucket import BucketStorage
from detect.data.storage.bucket_client import SCHEMES, mirror_folder
from detect.data.storage.cache_places import cache_home, user_cache
from detect.data.storage.interface import Storage
from detect.data.storage.local import LOCAL
from detect.data.tiles.windows import TileSettings, parse_tile
from detect.errors import ConfigError, short_repr

SPLITS = ("train", "val", "test")
DATA_DIR_VARIABLE = "DETECT_DATA_DIR"  # where built-in datasets are generated (builtin_root)


@dataclasses.dataclass(frozen=True)
class DataYaml:
    """The keys of a data yaml as written (ultralytics/yolov5 names; *_json, builtin and a split as a mapping
    {annotations, images, format} are ours; `names` may then be left out: the label file's are taken)."""

    train: str | list[str] | dict
    val: str | list[str] | dict
    names: list[str] | dict[int, str] | None = None
    path: str | None = None
    test: str | list[str] | dict | None = None
    nc: int | None = None
    train_json: str | None = None
    val_json: str | None = None
    test_json: str | None = None
    # Ours: the name of a dataset this project generates itself when `path` is missing (see builtin.py).
    builtin: str | None = None
    # Ours: train on windows of each image, {size, overlap, min_visible, empty_rate} (data/tiles/windows.py).
    tile: dict | None = None
    # Accepted so ultralytics yamls load unchanged; never run (docs/architecture.md, "No network").
    download: Any = None


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """A resolved dataset: root folder, per-split sources (absolute), class names."""

    source: Path
    root: Path
    names: tuple[str, ...]
    splits: dict[str, tuple[Path, ...]]
    json_files: dict[str, Path]
    builtin: str | None = None
    annotations: dict[str, AnnotationSource] = dataclasses.field(default_factory=dict)  # splits read from label files
    # Ours: `path` as a bucket URL (s3://, obs://); root is then its mirror folder (open_storage, data/storage/bucket.py).
    remote: str | None = None
    tile: TileSettings | None = None  # tiled training's windows, as the yaml asks (--tile overrides its size)

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self.names)


def _names_list(names: list[str] | dict[int, str], nc: int | None, source: Path) -> tuple[str, ...]:
    if isinstance(names, dict):
        if set(names) != set(range(len(names))):
            raise ConfigError(f"{source}: key 'names' must map 0..{len(names) - 1} to names, got keys "
                              f"{short_repr(list(names))}")
        names = [names[index] for index in range(len(names))]
    if nc is not None and nc != len(names):
        raise ConfigError(f"{source}: nc is {nc} but 'names' lists {len(names)} classes")
    return tuple(str(name) for name in names)


def builtin_root(name: str) -> Path:
    """Where built-in dataset `name` is generated: $DETECT_DATA_DIR/name, else the user cache's detect/name."""
    # Never inside the package (site-packages may be read-only or shared) nor the working directory, so an
    # editable checkout and a wheel behave the same.
    chosen = os.environ.get(DATA_DIR_VARIABLE)
    if chosen:
        return Path(chosen).expanduser().resolve() / name
    return user_cache() / name


def _resolve_root(raw: str | None, source: Path) -> Path:
    """`path` from the yaml's folder, else from the working directory (where yolov5 looks). Where neither exists, the
    one an error should name: the working directory's for a bundled yaml (its data is never inside the package)."""
    if raw is None:
        return source.parent.resolve()
    path = Path(raw).expanduser()
    if path.is_absolute():
        return path
    beside = (source.parent / path).resolve()
    if beside.exists():
        return beside
    from_cwd = path.resolve()
    return from_cwd if from_cwd.exists() or source.is_relative_to(CONFIGS_DIR.resolve()) else beside


def load_data_config(name_or_path: str | Path) -> DataConfig:
    """Load a data yaml by bare name (configs/data/) or path; relative paths resolved, nothing read yet."""
    source = resolve_config(name_or_path, "data").resolve()
    raw = from_mapping(DataYaml, read_yaml(source), source)
    scheme, separator, _ = (raw.path or "").partition("://")
    remote = raw.path if separator and scheme in SCHEMES else None
    # a bucket's files are kept in the cache folder; open_storage moves them to --cache-dir's
    root = mirror_folder(remote, user_cache()) if remote else _resolve_root(raw.path, source)
    if raw.builtin is not None and raw.path is None:
        root = builtin_root(raw.builtin)  # generated there on first use
    elif raw.builtin is not None and not (source.parent / raw.path).exists():
        root = (source.parent / raw.path).resolve()  # generated there on first use
    splits: dict[str, tuple[Path, ...]] = {}
    json_files: dict[str, Path] = {}
    annotations: dict[str, AnnotationSource] = {}
    for split in SPLITS:
        value = getattr(raw, split)
        if isinstance(value, dict):
            annotations[split] = annotation_source(value, root, source, split)
            splits[split] = (annotations[split].images,)
        elif value is not None:
            entries = [value] if isinstance(value, str) else value
            splits[split] = tuple(root / entry for entry in entries)
        json_name = getattr(raw, f"{split}_json")
        if json_name is not None:
            if split in annotations:
                raise ConfigError(f"{source}: '{split}' reads its labels from annotations, so '{split}_json' is not "
                                  "needed (a COCO json split is its own ground truth): keep one")
            json_files[split] = root / json_name
    names = _names_list(raw.names, raw.nc, source) if raw.names is not None else \
        _names_of_annotations(annotations, raw.nc, source)
    tile = parse_tile(raw.tile, str(source)) if raw.tile is not None else None
    return DataConfig(source=source, root=root, names=names, splits=splits, json_files=json_files, builtin=raw.builtin,
                      annotations=annotations, remote=remote, tile=tile)


def _names_of_annotations(annotations: dict[str, AnnotationSource], nc: int | None, source: Path) -> tuple[str, ...]:
    """Without `names`, the classes of the train split's label file (else the first split that has one)."""
    if not annotations:
        raise ConfigError(f"{source}: missing key 'names'")
    return _names_list(list(names_of(annotations.get("train") or next(iter(annotations.values())))), nc, source)


def check_sources(data: DataConfig, splits: tuple[str, ...]) -> None:
    """Raise ConfigError naming the yaml key of the first source of `splits` that does not exist, so that a missing
    folder stops a run before any work; a built-in dataset is generated on first use, and a bucket's splits are looked
    for in its listing, so neither is looked for here."""
    if data.builtin is not None or data.remote is not None:
        return
    for split in splits:
        annotated = data.annotations.get(split)
        if annotated is not None and not annotated.path.exists():
            raise ConfigError(f"{data.source}: '{split}' annotations names {annotated.path}, which does not exist "
                              f"(check 'path' and '{split}' there)")
        for path in data.splits.get(split, ()):
            if not path.exists():
                raise ConfigError(f"{data.source}: '{split}' names {path}, which does not exist "
                                  f"(check 'path' and '{split}' there)")


def open_storage(config: DataConfig, cache_dir: str | Path | None = None) -> tuple[DataConfig, Storage]:
    """The storage of `config`'s files, and the config with its paths where that storage shows them: local folders
    as they are; a bucket (path: s3://...) in its mirror folder under the cache folder (--cache-dir,
    $DETECT_CACHE_DIR, the user cache: cache_places.cache_home), whose files are fetched as they are read."""
    if config.remote is None:
        return config, LOCAL
    home = cache_home(cache_dir)
    storage, root = BucketStorage(config.remote, home), mirror_folder(config.remote, home)
    if root == config.root:
        return config, storage

    def moved(path: Path) -> Path:  # a path outside the bucket's root (a local label file) stays
        return root / path.relative_to(config.root) if path.is_relative_to(config.root) else path

    return dataclasses.replace(
        config, root=root, splits={split: tuple(map(moved, paths)) for split, paths in config.splits.items()},
        json_files={split: moved(path) for split, path in config.json_files.items()},
        annotations={split: dataclasses.replace(source, path=moved(source.path), images=moved(source.images))
                     for split, source in config.annotations.items()}), storage
