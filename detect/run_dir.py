"""Run folders: runs/<task>/<name>, with exp, exp2, exp3, ... when the name is taken; and the one way a user string
(a class name, a downloaded file's name) becomes a file or folder name in them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from detect.atomic_file import output_folder
from detect.errors import UserError

# Control characters (C0, DEL, C1), path separators of every platform, and what Windows refuses in a name (':' also
# opens an NTFS stream): each becomes '_'.
UNSAFE_CHARACTERS = re.compile(r'[\x00-\x1f\x7f-\x9f/\\<>:"|?*]')
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Windows' device names, reserved with any extension (CON.jpg is the console too).
RESERVED_NAMES = {"CON", "PRN", "AUX", "NUL", *(f"{device}{n}" for device in ("COM", "LPT") for n in range(1, 10))}
MAX_NAME_BYTES = 100  # of a made-safe name before its suffix: far under the 255 bytes file systems allow
NAME_RULES = "a folder inside --project: no '..' component, not absolute, no control character"


def safe_name(text: str, fallback: str = "_") -> str:
    """`text` as one readable file or folder name: separators, control and Windows-reserved characters become '_',
    a name of dots only or a reserved device name gets a leading '_', an empty one is `fallback`, and it is cut to
    MAX_NAME_BYTES of UTF-8 ('../../x' -> '.._.._x')."""
    name = UNSAFE_CHARACTERS.sub("_", text)
    encoded = name.encode("utf-8")
    if len(encoded) > MAX_NAME_BYTES:
        name = encoded[:MAX_NAME_BYTES].decode("utf-8", errors="ignore")
    if not name.strip():
        return fallback
    if set(name) <= {"."} or name.split(".")[0].strip().upper() in RESERVED_NAMES:
        name = f"_{name}"
    return name


def safe_names(texts: Sequence[str], prefix: str = "class") -> tuple[str, ...]:
    """A safe_name for each text, unique even where file systems ignore case: names that needed no change keep
    theirs first, a clash gets '_<index>' ('a/b' and 'a_b' -> 'a_b_0' and 'a_b'); an empty text is <prefix><index>."""
    names = [safe_name(text, f"{prefix}{index}") for index, text in enumerate(texts)]
    taken: set[str] = set()
    unique = list(names)
    order = sorted(range(len(texts)), key=lambda index: names[index] != texts[index])  # stable: index order within
    for index in order:
        name, number = names[index], 0
        while name.casefold() in taken:
            name = f"{names[index]}_{index}" + (f"_{number}" if number else "")
            number += 1
        taken.add(name.casefold())
        unique[index] = name
    return tuple(unique)


def check_folder(path: str | Path, flag: str) -> None:
    """A folder the user names (--project, --output-dir) may be anywhere, but holds no control character."""
    if CONTROL_CHARACTERS.search(str(path)):
        raise UserError(f"{flag} {str(path)!r}: a folder name with a control character (newline, tab, ...); "
                        "choose one without")


def check_run_name(name: str) -> None:
    """--name is a folder inside --project (exp, or exp/a): a '..' component, an absolute path, a control character or
    no name at all is refused."""
    parts = [part for part in re.split(r"[\\/]", name) if part not in ("", ".")]
    absolute = name.startswith(("/", "\\")) or bool(Path(name).drive)  # a drive: C:x on Windows
    if absolute or ".." in parts or not parts or CONTROL_CHARACTERS.search(name):
        raise UserError(f"--name {name!r}: must be {NAME_RULES}")


def check_run_folder(project: str | Path, name: str) -> None:
    """--project may be anywhere (no control character), --name is a folder inside it: the check of every CLI's
    settings, and of make_run_dir."""
    check_folder(project, "--project")
    check_run_name(name)


def make_run_dir(project: str | Path, name: str, exist_ok: bool = False) -> Path:
    """Create and return project/name, or the first free project/name<N> (N >= 2) unless exist_ok; project and name
    are checked first (check_run_folder), so nothing is made outside project."""
    check_run_folder(project, name)
    project = Path(project)
    path = project / name
    number = 2
    while path.exists() and not exist_ok:
        path = project / f"{name}{number}"
        number += 1
    return output_folder(path, "run folder")
