"""What the label check found for a whole split, flat: sizes, label rows, background flags, and the few problems."""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Sequence

import numpy as np

from detect.data.labels.check import MISSING_LABELS, CheckResult

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, eq=False)
class CheckedImages:
    """N checked images in listing order: widths, heights (N,) int32, offsets (N + 1,) int64 into rows (M, 5)
    float32 and crowd (M,) bool, background (N,) bool, and one dict per image with anything to report
    ({"index", "skipped", "fixes", "notes", "details"}; most images have none, so this list stays short)."""

    widths: np.ndarray
    heights: np.ndarray
    offsets: np.ndarray
    rows: np.ndarray
    crowd: np.ndarray
    background: np.ndarray
    problems: list[dict]

    @classmethod
    def from_results(cls, results: Sequence[CheckResult]) -> CheckedImages:
        """Flatten per-image results (a skipped image keeps no rows)."""
        kept = [result.rows if result.skipped is None else result.rows[:0] for result in results]
        offsets = np.zeros(len(results) + 1, np.int64)
        np.cumsum([len(rows) for rows in kept], out=offsets[1:])
        crowd = [result.crowd[:len(rows)] for result, rows in zip(results, kept)]
        problems = [{"index": index, "skipped": result.skipped, "fixes": result.fixes, "notes": result.notes,
                     "details": result.details} for index, result in enumerate(results)
                    if result.skipped or result.fixes or result.notes or result.details]
        return cls(widths=np.array([result.width for result in results], np.int32),
                   heights=np.array([result.height for result in results], np.int32), offsets=offsets,
                   rows=np.concatenate(kept or [np.zeros((0, 5), np.float32)]).astype(np.float32).reshape(-1, 5),
                   crowd=np.concatenate(crowd or [np.zeros(0, bool)]).astype(bool),
                   background=np.array([result.background for result in results], bool), problems=problems)

    @property
    def usable(self) -> np.ndarray:
        """(N,) bool: not skipped."""
        usable = np.ones(len(self.widths), bool)
        usable[[problem["index"] for problem in self.problems if problem["skipped"]]] = False
        return usable


def summarise(split: str, images: Sequence[str], checked: CheckedImages, cache_state: str,
              unlisted: Sequence[tuple[str, str]] = ()) -> tuple[dict[str, int], list[str]]:
    """(counts by problem name, detail lines), and the summary table logged. `unlisted` are the (path, why) of the
    entries the listing could not take (a broken or looping link, an unreadable folder, a FIFO named x.jpg): each
    is found and skipped, by its reason."""
    usable = checked.usable
    counts = collections.Counter(found=len(usable), background=int((checked.background & usable).sum()), fixed=0,
                                  skipped=0)
    details = _count_unlisted(unlisted, counts)
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
    lines = [f"label check, {split} split (cache {cache_state}):"]
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
