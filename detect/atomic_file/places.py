"""Where a write lands, found at the moment of writing, and what it must never reach: the command's sources.

A command registers its sources as it reads them (`protect`): a file (the data yaml, an annotation file, the weights,
an image to predict) as its folder's identity and its name, a folder whose whole tree it reads (a split's images and
labels) as its identity. Identity is (device, inode): every spelling of a path (links, '..', a second mount of the
same folder) names one source, while a hard link is a name of its own (the writer only ever renames over a name, so
the file behind another name keeps its bytes). What a command registers is forgotten when it ends (`command`: every
CLI, and each Python entry point: train.run, val.run, predict.run, export.run, convert); a read outside any command
(a Detector, a torch.hub model in a notebook) registers nothing, so that it never stands in the way of a later run.

A write's place is its path with every link followed, refused when it is a source file or lies inside a source
folder. Inside an output folder (`output_folder`: a run folder, convert's --out, export's --output-dir) no link is
followed: a link found there in place of a folder is replaced by a real folder, and a file is always renamed over,
never written through. Above an output folder, and for a write outside any (a cache, a single file named by a flag),
links are followed: the user chose them. A cache beside the data (`cache=True`: the label cache, --cache disk's .npy)
may lie inside a source folder, never on a source file."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from detect.errors import UserError

LOGGER = logging.getLogger(__name__)

FolderId = tuple[int, int]  # (st_dev, st_ino)


@dataclasses.dataclass(eq=False)  # frames are told apart by identity: two empty ones are not one
class _Frame:
    """One command's registrations."""

    entries: dict[tuple[int, int, str], str] = dataclasses.field(default_factory=dict)  # (folder id, name) -> what
    trees: dict[FolderId, str] = dataclasses.field(default_factory=dict)  # a folder read whole -> what it is
    roots: dict[str, str] = dataclasses.field(default_factory=dict)  # output folder, given and resolved -> as given


@dataclasses.dataclass(frozen=True)
class Source:
    """A source a write would reach: its path as found and what it is ("the data yaml", "the 'val' split's images")."""

    path: str
    what: str


_FRAMES = [_Frame()]  # the process's, then one per command running
_LOCK = threading.Lock()
_verdicts: dict[tuple[str, int, int], Source | None] = {}  # real folder and its identity -> the tree holding it


def _changed() -> None:
    _verdicts.clear()


@contextlib.contextmanager
def command() -> Iterator[None]:
    """The sources and output folders registered while the block runs are known until it ends (a with block, or a
    decorator of a command's function)."""
    frame = _Frame()
    with _LOCK:
        _FRAMES.append(frame)
        _changed()
    try:
        yield
    finally:
        with _LOCK:
            _FRAMES.remove(frame)
            _changed()


def _folder_id(folder: str, known: dict[str, FolderId | None]) -> FolderId | None:
    if folder not in known:
        try:
            info = os.stat(folder)
            known[folder] = (info.st_dev, info.st_ino)
        except OSError:
            known[folder] = None
    return known[folder]


def protect(paths: Iterable[str | os.PathLike], what: str, *, trees: bool = False) -> None:
    """Register `paths` as read by the running command: each as a file, or with `trees` a folder among them as read
    whole (everything under it). A link is registered as itself and as what it leads to; a path that does not exist
    is left out; outside any command, nothing is."""
    if len(_FRAMES) == 1:
        return
    entries: dict[tuple[int, int, str], str] = {}
    whole: dict[FolderId, str] = {}
    folders: dict[str, FolderId | None] = {}
    for path in paths:
        absolute = os.path.join(*absolute_folder(path))
        try:
            spellings = [absolute, os.path.realpath(absolute)] if os.path.islink(absolute) else [absolute]
            target = os.stat(absolute)
        except (OSError, ValueError):  # missing, a loop, a NUL in the name: nothing there to protect
            continue
        if trees and stat.S_ISDIR(target.st_mode):
            whole[(target.st_dev, target.st_ino)] = what
            spellings = spellings[:1] if len(spellings) > 1 else []  # the link itself stays a source
        for spelling in spellings:
            folder, name = os.path.split(spelling)
            folder_id = _folder_id(folder, folders)
            if folder_id is not None and name:
                entries[(*folder_id, name)] = what
    with _LOCK:
        _FRAMES[-1].entries.update(entries)
        _FRAMES[-1].trees.update(whole)
        _changed()


def add_root(given: str, real: str) -> None:
    """Register an output folder (absolute as given, and resolved): links below it are never written through."""
    with _LOCK:
        _FRAMES[-1].roots.update({given: given, real: given})


def _holds(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def root_of(folder: str) -> tuple[str, str] | None:
    """(the spelling of the output folder that holds absolute `folder`, the output folder as given) for the deepest
    registered output folder holding it; None when none does."""
    found = [(prefix, given) for frame in list(_FRAMES) for prefix, given in list(frame.roots.items())
             if _holds(prefix, folder)]
    return max(found, key=lambda pair: len(pair[0]), default=None)


def entry_at(folder_id: FolderId, name: str) -> str | None:
    """What the file `name` in the folder of identity `folder_id` is, where it is a source; else None."""
    key = (*folder_id, name)
    return next((frame.entries[key] for frame in list(_FRAMES) if key in frame.entries), None)


def _tree(folder_id: FolderId) -> str | None:
    return next((frame.trees[folder_id] for frame in list(_FRAMES) if folder_id in frame.trees), None)


def tree_holding(real_folder: str) -> Source | None:
    """The source folder read whole that is `real_folder` (resolved, existing) or holds it; else None. Each
    folder up to the file system's root is compared by identity, so a second mount of a source is found too."""
    if not any(frame.trees for frame in list(_FRAMES)):
        return None
    info = os.stat(real_folder)
    key = (real_folder, info.st_dev, info.st_ino)
    if key not in _verdicts:
        found, folder = None, real_folder
        while found is None:
            what = _tree((info.st_dev, info.st_ino))
            if what is not None:
                found = Source(folder, what)
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder, info = parent, os.stat(parent)
        _verdicts[key] = found
    return _verdicts[key]



class Refused(UserError):
    """A write that would replace a source of the command, or enter a folder it reads."""


class WriteError(UserError, OSError):
    """A write the file system refused (no space, no permission, a folder where a file goes): one line for the CLIs,
    and an OSError still, with its errno, for a caller that carries on without the file (a cache)."""

    def __init__(self, path: str | os.PathLike, error: OSError) -> None:
        super().__init__(error.errno, error.strerror, error.filename)
        self.line = f"cannot write {path} ({error.strerror or error})"

    def __str__(self) -> str:
        return self.line


@contextlib.contextmanager
def said(path: str | os.PathLike) -> Iterator[None]:
    """An OSError of the block as a WriteError naming `path` (a UserError goes on as it is)."""
    try:
        yield
    except UserError:
        raise
    except OSError as error:
        raise WriteError(path, error) from None


def _through(given: str | os.PathLike, real: str) -> str:
    """' (through a link: it leads to REAL)' where `given` does not spell `real`."""
    return "" if os.path.abspath(os.fspath(given)) == real else f" (through a link: it leads to {real})"


def _refuse_inside(real: str, given: str | os.PathLike, label: str, existing: str | None = None) -> None:
    """Refused, saying `label` first, when `real` (the real path `given` leads to, existing or not; `existing`: its
    nearest existing folder where known) is, or lies inside, a source folder read whole."""
    existing = existing or real
    while not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    found = tree_holding(existing)
    if found is not None:
        where = "is" if found.path == real else "lies inside"
        raise Refused(f"{label}: it {where} {found.path}, {found.what}, which this command reads and never writes "
                      f"into{_through(given, real)}; choose a place outside it")


def refuse_source(folder: str, name: str, given: str | os.PathLike, cache: bool = False,
                  label: str | None = None) -> None:
    """Refused when `name` in the real, existing `folder` is a source, or (unless `cache`) when `folder` is or lies
    inside a source folder; the message names `given`, the path as the caller spelt it, after `label` (default:
    'cannot write GIVEN')."""
    info = os.stat(folder)
    what = entry_at((info.st_dev, info.st_ino), name)
    real = os.path.join(folder, name)
    label = label or f"cannot write {given}"
    if what is not None:
        raise Refused(f"{label}: it is {real}, {what}, which this command reads and never replaces"
                      f"{_through(given, real)}")
    if not cache:
        _refuse_inside(real, given, label, existing=folder)


def absolute_folder(path: str | os.PathLike) -> tuple[str, str]:
    """(absolute folder, name) of `path`; a '..' in it is read as the kernel reads it, after the links before it."""
    spelt = os.path.join(os.getcwd(), os.fspath(path))
    folder, name = os.path.split(spelt)
    if os.pardir in folder.split(os.sep):
        return os.path.realpath(folder), name
    return os.path.abspath(folder), name


def check_output_folder(path: str | os.PathLike, flag: str) -> str:
    """The real path `path` leads to (links in its own spelling followed: the user chose them); Refused, naming
    `flag`, when it is or lies inside a source. Nothing is made: every rank of a job can ask before one makes it."""
    real = os.path.realpath(os.path.join(*absolute_folder(path)))
    _refuse_inside(real, path, f"{flag} {path}")
    if os.path.isdir(os.path.dirname(real)):
        refuse_source(os.path.dirname(real), os.path.basename(real), path, cache=True, label=f"{flag} {path}")
    return real


def output_folder(path: str | os.PathLike, flag: str) -> Path:
    """Make the output folder `path` (check_output_folder first) and register it, so that nothing written under it goes
    through a link; one UserError, naming `flag`, when it is or lies inside a source, is a file or cannot be made.
    Returns `path` as given."""
    absolute = os.path.join(*absolute_folder(path))
    real = check_output_folder(path, flag)
    try:
        os.makedirs(real, exist_ok=True)
    except FileExistsError:
        what = "a link that leads back to itself (a loop)" if os.path.islink(real) else "a file, not a folder"
        raise UserError(f"{flag} {path}: is {what}") from None
    except OSError as error:
        raise UserError(f"{flag} {path}: cannot be made ({error.strerror or error})") from None
    add_root(absolute, real)
    return Path(path)


def _real_child(parent: str, name: str, root: str, make: bool) -> str | None:
    """The real folder `name` in `parent`, inside output folder `root`: made where missing (None when not `make`), a
    link there replaced by a folder (said in one line); a file there is a UserError."""
    path = os.path.join(parent, name)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if not make:
            return None
        os.makedirs(path, exist_ok=True)
        return path
    if stat.S_ISLNK(info.st_mode):
        if not make:
            return None
        refuse_source(parent, name, path, cache=True)  # a link the command reads is a source like any file
        target = os.readlink(path)
        os.unlink(path)  # a link only: what it leads to is left as it is
        os.mkdir(path)
        LOGGER.warning("%s: a link (to %s) inside the output folder %s, replaced by a folder so that nothing is "
                       "written through it", path, target, root)
        return path
    if not stat.S_ISDIR(info.st_mode):
        raise UserError(f"cannot write under {path}: it is a file, not a folder")
    return path


def real_folder(folder: str, cache: bool = False, make: bool = True,
                given: str | os.PathLike | None = None) -> str | None:
    """The real path of absolute `folder`, made (unless not `make`: None when it is missing, or reached through a
    link inside an output folder), checked against the sources before anything is made; `given`: the path written,
    `folder` itself or a file in it, as messages name it."""
    given = folder if given is None else given
    inner = "" if os.path.abspath(os.fspath(given)) == folder else os.path.basename(os.fspath(given))
    root = root_of(folder)
    if root is None:
        real = os.path.realpath(folder)
        if not cache:
            _refuse_inside(os.path.join(real, inner) if inner else real, given, f"cannot write {given}")
        if not os.path.isdir(real):
            if not make:
                return None
            os.makedirs(real, exist_ok=True)
        return real
    prefix, output = root
    real = os.path.realpath(output)
    if not cache:
        _refuse_inside(real, output, f"cannot write in the output folder {output}")
    if make and not os.path.isdir(real):  # removed meanwhile: made again
        os.makedirs(real, exist_ok=True)
    for name in filter(None, folder[len(prefix):].split(os.sep)):
        real = _real_child(real, name, output, make)
        if real is None:
            return None
    return real


def settle(path: str | os.PathLike, cache: bool = False) -> tuple[str, str]:
    """(real folder, name) where `path` is written now: its folder made and every link followed or replaced as the
    module says; Refused when that is a source, WriteError when its folder cannot be made."""
    folder, name = absolute_folder(path)
    with said(path):
        real = real_folder(folder, cache, given=path)
    refuse_source(real, name, path, cache)
    return real, name
