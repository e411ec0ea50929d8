#!/usr/bin/env bash
# The README's first run as a newcomer meets it, timed: a fresh clone of this repository's HEAD, a fresh virtual
# environment, `pip install -e .`, then the README's first `python -m detect.train` line as written, on a built-in
# dataset generated anew (DETECT_DATA_DIR in the work folder). Prints the CPU, the load average before and after, the
# seconds of the install and of the run, and the run's last lines (what best.pt scored and what to run next).
#
# Usage: scripts/first_run.sh [WORK_DIR]    (default: a temporary folder, removed at the end; a venv is several GB)
# PIP_ARGS: what goes before `-e .` (e.g. the CPU build of torch first: see the README's Install).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -ge 1 ]; then
    work=$1
    mkdir -p "$work"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
git clone -q "$repo" "$work/detect"
cd "$work/detect"
command=$(grep -m1 -o 'python -m detect.train [^#]*' README.md | sed 's/ *$//')  # the first line's run
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') x $(nproc); load average before:" \
     "$(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)"
python3 -m venv .venv
source .venv/bin/activate
start=$(date +%s)
# shellcheck disable=SC2086 (PIP_ARGS is a list of words)
pip install -q ${PIP_ARGS:-} -e .
echo "pip install -e .: $(( $(date +%s) - start )) s"
start=$(date +%s)
DETECT_DATA_DIR="$work/data" $command --no-progress > "$work/first_run.log" 2>&1
seconds=$(( $(date +%s) - start ))
tail -n 6 "$work/first_run.log"
echo "$command: $seconds s (dataset generation included); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
