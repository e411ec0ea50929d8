"""Where a dataset's caches go: beside the data while its folder is writable, else a cache folder (--cache-dir,
$DETECT_CACHE_DIR, the user cache); one name per dataset folder however many share a cache folder."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

CACHE_DIR_VARIABLE = "DETECT_CACHE_DIR"  # where caches go, as --cache-dir (which wins)
CACHE_DIR_HELP = (f"folder for the label cache (default: ${CACHE_DIR_VARIABLE}, else beside the labels, or "
                  "$XDG_CACHE_HOME/detect when their folder is read-only)")


def user_cache() -> Path:
    """$XDG_CACHE_HOME/detect, else ~/.cache/detect (the XDG base directory spec ignores a relative XDG_CACHE_HOME)."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(cache) if Path(cache).is_absolute() else Path.home() / ".cache") / "detect"


def cache_home(cache_dir: str | Path | None = None) -> Path:
    """The cache folder: --cache-dir, else $DETECT_CACHE_DIR, else the user cache (user_cache)."""
    return Path(cache_dir or os.environ.get(CACHE_DIR_VARIABLE) or user_cache()).expanduser().absolute()


def folder_writable(folder: Path) -> bool:
    """True if we may write in `folder`; a folder without write bits counts as read-only even for root."""
    try:
        mode = os.stat(folder).st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IWUSR) and os.access(folder, os.W_OK)


def cache_root(data_folder: Path, cache_dir: str | Path | None = None) -> Path | None:
    """The folder for caches of the data in `data_folder`: `cache_dir` (--cache-dir), else $DETECT_CACHE_DIR, else
    None (beside the data) while `data_folder` is writable, else the user cache (user_cache)."""
    cache_dir = cache_dir or os.environ.get(CACHE_DIR_VARIABLE) or None
    if cache_dir is None:
        return None if folder_writable(data_folder) else user_cache()
    return Path(cache_dir).expanduser()


def relocated(usual: Path, root: Path | None) -> Path:
    """`usual` (a cache's place beside the data) itself without a root, else root/<name>-<hash of usual><suffixes>:
    one per dataset split or image folder however many share the root, its name still readable."""
    if root is None:
        return usual
    stem, dot, suffixes = usual.name.partition(".")
    return root / f"{stem}-{hashlib.sha256(os.fsencode(usual)).hexdigest()[:12]}{dot}{suffixes}"


def cache_path(usual: Path, cache_dir: str | Path | None = None) -> Path:
    """Where a cache whose usual place is `usual`, beside the data, goes (cache_root, relocated)."""
    return relocated(usual, cache_root(usual.parent, cache_dir))
