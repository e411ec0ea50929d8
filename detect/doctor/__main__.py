"""`python -m detect.doctor`."""

from detect import cli
from detect.doctor import main, parse_args

__all__ = ["main", "parse_args"]

if __name__ == "__main__":
    cli.exit_process(main())
