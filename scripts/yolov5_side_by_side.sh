#!/usr/bin/env bash
# Validation wall time and NMS ms per image, ours against ultralytics/yolov5's, on this machine, in alternating rounds.
#
#   scripts/yolov5_side_by_side.sh YOLOV5_CHECKOUT [YOLOV5_PYTHON] [ROUNDS] [bench_nms.py flags, e.g. --threads 1]
#
# Run from the repository root with our environment active. YOLOV5_CHECKOUT is a yolov5 working tree, YOLOV5_PYTHON
# the Python of an environment with its requirements.txt (default: python). Both sides validate the official
# yolov5n.pt on coco128 at 640, batch $BATCH_SIZE (default 16; both tools' own default is 32), on the CPU, each with
# its own defaults otherwise (yolov5: 8 loader workers, its own mAP; ours: faster-coco-eval where installed, else
# pycocotools). Rounds alternate (ours, yolov5's, ours, ...) so that the load of a shared machine falls on both; the
# medians, each round and the load average are printed.
set -euo pipefail

checkout=$(cd "${1:?usage: $0 YOLOV5_CHECKOUT [YOLOV5_PYTHON] [ROUNDS]}" && pwd)
yolov5_python=${2:-python}
rounds=${3:-2}
batch_size=${BATCH_SIZE:-16}
weights=$(realpath weights/yolov5n.pt)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# yolov5 reads a data yaml whose relative path is taken from its checkout: give it coco128's absolute path
sed "s#^path: .*#path: $(realpath ../datasets/coco128)#" detect/configs/data/coco128.yaml > "$work/coco128.yaml"
source "$(dirname "$0")/yolov5_offline.sh"  # no network for yolov5
python -c "from detect.backend.cpu import cpu_description; print(cpu_description())"  # what was measured on

seconds() {  # wall seconds of a command, its output kept in $work/log
  local start end
  start=$(date +%s.%N)
  "$@" > "$work/log" 2>&1 || { cat "$work/log"; return 1; }
  end=$(date +%s.%N)
  python -c "print(f'{$end - $start:.1f}')"
}

ours=() theirs=()
for round in $(seq "$rounds"); do
  ours+=("$(seconds python -m detect.val --weights "$weights" --data coco128.yaml --imgsz 640 \
            --batch-size "$batch_size" --device cpu --project "$work/ours" --no-progress)")
  grep -E "^ +all |Speed:" "$work/log"
  theirs+=("$(cd "$checkout" && seconds "$yolov5_python" val.py --weights "$weights" --data "$work/coco128.yaml" \
              --imgsz 640 --batch-size "$batch_size" --device cpu --project "$work/yolov5")")
  grep -E "^ +all |Speed:" "$work/log"
  echo "round $round: ours ${ours[-1]} s, yolov5 ${theirs[-1]} s; $(uptime | sed 's/.*load/load/')"
done
python - "${ours[*]}" "${theirs[*]}" <<'EOF'
import statistics, sys
ours, theirs = (statistics.median(map(float, argument.split())) for argument in sys.argv[1:])
print(f"val wall, median of rounds: ours {ours:.1f} s, yolov5 {theirs:.1f} s, ratio {ours / theirs:.2f}")
EOF
# NMS: both sides in one environment; OpenMP threads sleep while they wait, as in our CLIs (docs/benchmarks.md, Inference)
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} python scripts/bench_nms.py --yolov5 "$checkout" \
  --yolov5-python "$yolov5_python" --rounds "$rounds" "${@:4}"
