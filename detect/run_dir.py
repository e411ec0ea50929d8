"""Run folders: runs/<task>/<name>, with exp, exp2, exp3, ... when the name is taken."""

from __future__ import annotations

from pathlib import Path


def make_run_dir(project: str | Path, name: str, exist_ok: bool = False) -> Path:
    """Create and return project/name, or the first free project/name<N> (N >= 2) unless exist_ok."""
    project = Path(project)
    path = project / name
    number = 2
    while path.exists() and not exist_ok:
        path = project / f"{name}{number}"
        number += 1
    path.mkdir(parents=True, exist_ok=True)
    return path
