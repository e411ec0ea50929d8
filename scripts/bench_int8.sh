#!/usr/bin/env bash
# INT8 vs fp32 ONNX on this CPU (docs/deploy.md, "INT8"): export yolov5n at 640, static batch 1, with --int8
# calibrated on coco128's train split; then val of each file, alternated, ROUNDS times, with the load before each.
# Run from the repository root with ../shared beside it:
#     scripts/bench_int8.sh [OUT_DIR] [ROUNDS]        (default runs/bench_int8 2; about 2 minutes a round here)
# Record the mAP rows and the medians of the "Speed:" lines and of the wall times with the date and this command.
set -euo pipefail
out=${1:-runs/bench_int8}
rounds=${2:-2}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
date -u +%Y-%m-%dT%H:%M:%SZ | tee "$out/machine.txt"
python -c "import onnxruntime; print('onnxruntime', onnxruntime.__version__)" | tee -a "$out/machine.txt"
grep -m1 "model name" /proc/cpuinfo | tee -a "$out/machine.txt"
echo "avx512_vnni: $(grep -c -m1 avx512_vnni /proc/cpuinfo || true); cores: $(nproc)" | tee -a "$out/machine.txt"

python -m detect.export --weights ../shared/weights/yolov5n.pt --include onnx --imgsz 640 --batch-size 1 \
    --int8 --data coco128.yaml --output-dir "$out" 2>&1 | tee "$out/export.txt"

for round in $(seq "$rounds"); do
    for model in yolov5n yolov5n-int8; do
        echo "round $round $model, load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/val.txt"
        start=$(date +%s.%N)
        python -m detect.val --weights "$out/$model.onnx" --data coco128.yaml --batch-size 1 --device cpu \
            --project "$out/val" --name "$model-$round" --no-progress 2>&1 | grep -E "^ +all |^Speed" | tee -a "$out/val.txt"
        echo "wall $(echo "$(date +%s.%N) - $start" | bc) s" | tee -a "$out/val.txt"
    done
done

# The network alone, both files interleaved so that other jobs slow both alike: ms per image (min and median of
# 20 runs after 3 warm-ups) at 1 and 2 onnxruntime threads.
python - "$out/yolov5n.onnx" "$out/yolov5n-int8.onnx" <<'PY' | tee "$out/session.txt"
import statistics, sys, time
import numpy as np, onnxruntime
for threads in (1, 2):
    sessions = []
    for path in sys.argv[1:]:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        sessions.append(onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"]))
    image = np.random.default_rng(0).random((1, 3, 640, 640), dtype=np.float32)
    times = [[] for _ in sessions]
    for _ in range(23):
        for session, spent in zip(sessions, times):
            start = time.perf_counter()
            session.run(None, {"images": image})
            spent.append((time.perf_counter() - start) * 1000)
    for path, spent in zip(sys.argv[1:], times):
        print(f"{threads} thread(s) {path}: min {min(spent[3:]):.1f} median {statistics.median(spent[3:]):.1f} ms")
PY
