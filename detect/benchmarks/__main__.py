"""`python -m detect.benchmarks`: see detect/benchmarks/__init__.py."""

from detect import cli
from detect.benchmarks import main

if __name__ == "__main__":
    cli.exit_process(main())
