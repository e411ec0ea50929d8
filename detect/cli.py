"""What every command-line entry point shares: logging set-up and one-line user errors (exit code 2)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from detect.errors import UserError


def run(main: Callable[[], int | None]) -> int:
    """Run a CLI body; a UserError becomes one line on stderr and exit code 2."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return main() or 0
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
