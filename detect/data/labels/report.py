"""What the label check of a split found, summed up: counts by problem name (the table logged) and the detail
lines (the details file beside the label cache: labels/cache.py, keep)."""

from __future__ import annotations

import collections
import logging
from collections.abc import Mapping, Sequence

from detect.data.labels.check import MISSING_LABELS, CheckedImages

LOGGER = logging.getLogger(__name__)


def summarise(split: str, images: Sequence[str], checked: CheckedImages, from_cache: bool,
              unlisted: Sequence[tuple[str, str]] = (), noted: Mapping[str, int] | None = None,
              noted_details: Sequence[str] = ()) -> tuple[dict[str, int], list[str]]:
    """(counts by problem name, detail lines), and the summary table logged (`from_cache`: the check was read from
    the label cache). `unlisted` are the (path, why) of the
    entries the listing could not take (a broken or looping link, an unreadable folder, a FIFO named x.jpg): each
    is found and skipped, by its reason. `noted` counts what reading a label file left out (data/annotations), by
    name, with its `noted_details` lines."""
    usable = checked.usable
    counts = collections.Counter(found=len(usable), background=int((checked.background & usable).sum()), fixed=0,
                                  skipped=0)
    counts.update({f"label file: {name}": count for name, count in (noted or {}).items()})
    details = [*noted_details, *_count_unlisted(unlisted, counts)]
    for problem in checked.problems:
        path, skipped = images[problem["index"]], problem["skipped"]
        if skipped:
            counts[f"skipped: {skipped}"] += 1
        counts.update(f"fixed: {fix}" for fix in problem["fixes"])
        counts.update(("background: " if note == MISSING_LABELS else "note: ") + note for note in problem["notes"])
        counts["fixed"] += bool(problem["fixes"]) and not skipped
        counts["skipped"] += bool(skipped)
        details += problem["details"] or ([f"{path}: {skipped}"] if skipped else [])
        details += [f"{path}: {note}" for note in problem["notes"]]
    counts["usable"] = counts["found"] - counts["skipped"]
    lines = [f"label check, {split} split ({'cache loaded' if from_cache else 'checked'}):"]
    lines += [f"  {key:<40} {counts[key]:>8}" for key in ("found", "usable", "background", "fixed", "skipped")]
    lines += [f"  {key:<40} {value:>8}" for key, value in sorted(counts.items()) if ":" in key]
    LOGGER.info("\n".join(lines))
    return dict(counts), details


def _count_unlisted(unlisted: Sequence[tuple[str, str]], counts: collections.Counter) -> list[str]:
    """Count the entries the listing skipped as found and skipped (by reason); their detail lines."""
    counts["found"] += len(unlisted)
    counts["skipped"] += len(unlisted)
    counts.update(f"skipped: {why}" for _, why in unlisted)
    return [f"{path}: {why}" for path, why in unlisted]
