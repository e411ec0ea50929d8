"""`python -m detect.tools.profile PATH`: what a profiler trace says: the top host operators by self time, the top
device kernels, and the data-loading share of each recorded step. PATH is a trace (.pt.trace.json, or torch_npu's
trace_view.json), a folder holding one, or a run folder of `python -m detect.train --profile` (its profile/).

    python -m detect.train --cfg yolov5n.yaml --epochs 1 --profile        # records, writes and prints it
    python -m detect.tools.profile runs/train/exp --top 20                # reads it again, e.g. copied off an NPU box
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from detect import cli
from detect.backend.profiler import find_trace, format_summary, summarize
from detect.config import POSITIVE, Settings, option
from detect.errors import UserError


@dataclasses.dataclass(frozen=True)
class ProfileSettings(Settings):
    """The options of `python -m detect.tools.profile`."""

    path: str = option(description="a trace file, a folder with one, or a run folder (its profile/)", flags=("path",))
    top: int = option(10, "operators and kernels to list", bound=POSITIVE)


parse_args = cli.settings_reader(ProfileSettings, "python -m detect.tools.profile", __doc__)


def resolve_trace(path: Path) -> Path:
    """The trace at `path`: the file itself, else the newest under the folder or its profile/ subfolder."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise UserError(f"{path}: no such file or folder")
    run_profile = path / "profile"
    return find_trace(run_profile if run_profile.is_dir() else path)


def report(args: ProfileSettings) -> None:
    """Print the summary of the trace at args.path."""
    print(format_summary(summarize(resolve_trace(Path(args.path))), top=args.top))


main = cli.main_for(parse_args, report)


if __name__ == "__main__":
    cli.exit_process(main())
