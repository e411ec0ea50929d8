"""A labelling tool's json read whole: anything that is not json Python can hold is one UserError naming the file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from detect.errors import UserError


def read_json(path: Path, what: str) -> Any:
    """The content of json file `path`; `what` names the format it should be ("a COCO instances json")."""
    try:
        return json.loads(path.read_bytes())
    except OSError as error:
        raise UserError(f"{path}: cannot read ({error.strerror or error})") from None
    except RecursionError:  # json's decoder recurses once a level: a file nested 100,000 deep ends Python's stack
        raise UserError(f"{path}: not {what} (nested deeper than the {sys.getrecursionlimit()} levels Python "
                        "reads)") from None
    except ValueError as error:  # not json, or not UTF-8/16/32
        raise UserError(f"{path}: not {what} ({type(error).__name__}: {error})") from None
