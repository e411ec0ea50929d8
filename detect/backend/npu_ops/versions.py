"""Which CANN each torch_npu release pairs with, from Ascend/pytorch's COMPATIBILITY table kept as data
(compatibility.json, with its source and commit), the installed CANN's version as its toolkit records it, and the
verdict on a pair with the fix in one line (docs/torch-npu.md, "Versions"). torch_npu itself checks only CANN 6.x
releases (torch_npu/_init/registry/registry_manager.py, `cann_pytorch_version_map`), so a wrong pair shows up as a
failed import or a failed op later, not as a message."""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from pathlib import Path

from packaging.version import InvalidVersion, Version

from detect.backend.environment import FAIL, OK, WARN, Check
from detect.backend.npu_ops.kernels import list_versions

# The toolkit's own install record: <ASCEND_HOME_PATH>/<arch>-linux/ascend_toolkit_install.info, whose `version=` line
# CANN's installation guide says to read (older layouts: ascend-toolkit/latest/<arch>-linux/, the same file).
TOOLKIT_INFO = "ascend_toolkit_install.info"
TABLE = "Ascend/pytorch's COMPATIBILITY table"
_CANN = re.compile(r"(\d+)\.(\d+)\.(?:RC(\d+)|(\d+))", re.IGNORECASE)


@functools.cache
def compatibility() -> tuple[tuple[str, str], ...]:
    """The table's (torch_npu, CANN) rows, newest release first."""
    data = json.loads(resources.files(__package__).joinpath("compatibility.json").read_text())
    return tuple((torch_npu, cann) for torch_npu, cann in data["pairs"])


def table_source() -> str:
    """Where the table comes from (file, section, commit, date)."""
    return json.loads(resources.files(__package__).joinpath("compatibility.json").read_text())["source"]


def read_cann_version(home: Path) -> str | None:
    """CANN's version from the toolkit's install record under `home` (ASCEND_HOME_PATH), e.g. "8.5.0" or "8.3.RC1";
    None when there is none."""
    for path in [*sorted(home.glob(f"*-linux/{TOOLKIT_INFO}")), home / TOOLKIT_INFO]:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "version" and value.strip():
                return value.strip()
    return None


def cann_order(version: str) -> tuple[int, int, int, int] | None:
    """A sort key of a CANN version: 8.3.RC1 < 8.3.0 < 8.5.0 < 9.1.0 (a release candidate before its release; a
    suffix such as -beta.2 or .alpha002 ignored); None when it does not parse."""
    match = _CANN.match(version.strip())
    if match is None:
        return None
    major, minor, candidate, patch = match.groups()
    return (int(major), int(minor), 0, int(candidate)) if candidate else (int(major), int(minor), 1, int(patch))


def _line(version: Version) -> tuple[int, int]:
    return version.release[0], version.release[1]


def _pinned_install(cann: str) -> list[str]:
    """`pip install` of the newest torch_npu the table pairs with this CANN among the lines pyproject.toml's npu extra
    pins (those with kernel lists), with the torch it requires; [] when there is none."""
    pinned = {_line(Version(version)) for version in list_versions()}
    choices = sorted((Version(torch_npu) for torch_npu, paired in compatibility()
                      if cann_order(paired) == cann_order(cann) and _line(Version(torch_npu)) in pinned), reverse=True)
    return [f"pip install torch-npu=={choices[0]} torch=={choices[0].base_version}"] if choices else []


def _fix(installed: Version, cann: str) -> str:
    """The two ways out of a bad pair: the torch_npu (of the lines we pin) the table pairs with this CANN, or the CANN
    it pairs with this torch_npu."""
    ways = _pinned_install(cann)
    exact = [paired for torch_npu, paired in compatibility() if Version(torch_npu) == installed]
    same_line = [paired for torch_npu, paired in compatibility() if _line(Version(torch_npu)) == _line(installed)]
    newest_cann = max((paired for _, paired in compatibility()), key=cann_order)
    if exact or same_line:
        ways.append(f"install CANN {(exact or same_line)[0]} for torch_npu {installed}")
    elif installed > max(Version(torch_npu) for torch_npu, _ in compatibility()):
        ways.append(f"install CANN {newest_cann} or newer for torch_npu {installed}")
    return " or ".join(ways) or f"see {TABLE}"


def check_pair(torch_npu: str, cann: str) -> Check:
    """Whether torch_npu `torch_npu` and CANN `cann` are a pair of the table: OK; FAIL with the fix in one line when
    the table pairs either with something else; WARN when the table does not know one of them (newer than it)."""
    try:
        installed = Version(torch_npu)
    except InvalidVersion:
        return Check("torch_npu+CANN", WARN, f"torch_npu version {torch_npu!r} does not parse", f"see {TABLE}")
    key, rows = cann_order(cann), compatibility()
    pair = f"torch_npu {torch_npu} with CANN {cann}"
    wanted = [paired for version, paired in rows if Version(version) == installed]
    for_cann = sorted(Version(version) for version, paired in rows if cann_order(paired) == key)
    if wanted:
        if any(cann_order(paired) == key for paired in wanted):
            return Check("torch_npu+CANN", OK, f"{pair}: a pair of {TABLE}")
        return Check("torch_npu+CANN", FAIL, f"{pair}: {TABLE} pairs torch_npu {torch_npu} with CANN "
                                               f"{', '.join(wanted)}", _fix(installed, cann))
    if not for_cann:
        newest = max((paired for _, paired in rows), key=cann_order)
        newer = key is not None and key > cann_order(newest)
        return Check("torch_npu+CANN", WARN, f"{pair}: CANN {cann} is {'newer than' if newer else 'not in'} {TABLE} "
                                               f"(its newest CANN: {newest})", "unverified pair: " + _fix(installed, cann))
    if installed > for_cann[-1]:
        newest_cann = max((paired for _, paired in rows), key=cann_order)
        if cann_order(newest_cann) == key:  # the table is older than this torch_npu
            tested = " or ".join(_pinned_install(cann)) or f"torch_npu {for_cann[-1]}"
            return Check("torch_npu+CANN", WARN, f"{pair}: torch_npu {torch_npu} is newer than {TABLE}, whose "
                                                   f"newest for CANN {cann} is torch_npu {for_cann[-1]}",
                         f"unverified pair; a pair of the table: {tested}")
        return Check("torch_npu+CANN", FAIL, f"{pair}: {TABLE} pairs CANN {cann} with torch_npu up to "
                                               f"{for_cann[-1]}; {torch_npu} is newer", _fix(installed, cann))
    if installed < for_cann[0]:
        return Check("torch_npu+CANN", FAIL, f"{pair}: {TABLE} pairs CANN {cann} with torch_npu {for_cann[0]} "
                                               f"and newer; {torch_npu} is older", _fix(installed, cann))
    return Check("torch_npu+CANN", WARN, f"{pair}: not a row of {TABLE} (CANN {cann} pairs with "
                                           f"{', '.join(map(str, for_cann))})", "unverified pair: " + _fix(installed, cann))
