#!/usr/bin/env bash
# INT8 vs fp32 on this CPU, for both runtimes (docs/deploy.md, "INT8"; docs/benchmarks.md, "INT8"): export yolov5n at
# 640, static batch 1, ONNX and OpenVINO IR with --int8 (each runtime's recipe: ONNX Runtime's QDQ, NNCF) calibrated
# on coco128's train split; then val of each file, alternated, ROUNDS times, with the load before each.
# Run from the repository root with weights/yolov5n.pt and ../datasets/coco128 (docs/usage.md, "Data"):
#     scripts/bench_int8.sh [OUT_DIR] [ROUNDS]        (default runs/bench_int8 2; about 4 minutes a round here)
# Record the mAP rows and the medians of the "Speed:" lines and of the wall times with the date and this command.
set -euo pipefail
out=${1:-runs/bench_int8}
rounds=${2:-2}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
date -u +%Y-%m-%dT%H:%M:%SZ | tee "$out/machine.txt"
python -c "import onnxruntime; print('onnxruntime', onnxruntime.__version__)" | tee -a "$out/machine.txt"
python -c "from detect.backend.cpu import cpu_description; print(cpu_description())" | tee -a "$out/machine.txt"

python -c "import openvino, nncf; print('openvino', openvino.__version__, 'nncf', nncf.__version__)" \
    | tee -a "$out/machine.txt"

python -m detect.export --weights weights/yolov5n.pt --include onnx openvino --imgsz 640 --batch-size 1 \
    --int8 --data coco128.yaml --output-dir "$out" 2>&1 | tee "$out/export.txt"

for round in $(seq "$rounds"); do
    for model in yolov5n.onnx yolov5n-int8.onnx yolov5n_openvino_model yolov5n-int8_openvino_model; do
        echo "round $round $model, load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/val.txt"
        start=$(date +%s.%N)
        python -m detect.val --weights "$out/$model" --data coco128.yaml --batch-size 1 --device cpu \
            --project "$out/val" --name "$model-$round" --no-progress 2>&1 | grep -E "^ +all |^Speed" | tee -a "$out/val.txt"
        echo "wall $(echo "$(date +%s.%N) - $start" | bc) s" | tee -a "$out/val.txt"
    done
done

# The network alone: ms per image (min and median of 20 runs after 3 warm-ups) at 1 and 2 onnxruntime threads, each
# file in a block of its own (a session's spinning threads slow any session run between its runs), the blocks
# alternated over 2 rounds so that other jobs slow both files alike.
python - "$out/yolov5n.onnx" "$out/yolov5n-int8.onnx" <<'PY' | tee "$out/session.txt"
import statistics, sys, time
import numpy as np, onnxruntime
image = np.random.default_rng(0).random((1, 3, 640, 640), dtype=np.float32)
for round in (1, 2):
    for threads in (1, 2):
        for path in sys.argv[1:]:
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            spent = []
            for _ in range(23):
                start = time.perf_counter()
                session.run(None, {"images": image})
                spent.append((time.perf_counter() - start) * 1000)
            print(f"round {round}, {threads} thread(s) {path}: min {min(spent[3:]):.1f} "
                  f"median {statistics.median(spent[3:]):.1f} ms")
            del session
PY

# The same for the OpenVINO IRs, compiled as detect's runtime compiles them (f32 inference precision; the int8 layers
# stay int8) with 1 and 2 inference threads.
python - "$out/yolov5n_openvino_model/yolov5n.xml" "$out/yolov5n-int8_openvino_model/yolov5n-int8.xml" <<'PY' \
    | tee "$out/openvino.txt"
import statistics, sys, time
import numpy as np
from detect.backend.openvino_runtime import import_openvino, shared_core
openvino, core = import_openvino("the benchmark"), shared_core("the benchmark")
image = np.random.default_rng(0).random((1, 3, 640, 640), dtype=np.float32)
for round in (1, 2):
    for threads in (1, 2):
        for path in sys.argv[1:]:
            compiled = core.compile_model(path, "CPU", {openvino.properties.hint.inference_precision: openvino.Type.f32,
                                                        openvino.properties.inference_num_threads: threads})
            request = compiled.create_infer_request()
            spent = []
            for _ in range(23):
                start = time.perf_counter()
                request.infer({0: image})
                spent.append((time.perf_counter() - start) * 1000)
            print(f"round {round}, {threads} thread(s) {path}: min {min(spent[3:]):.1f} "
                  f"median {statistics.median(spent[3:]):.1f} ms")
            del request, compiled
PY
