#!/usr/bin/env bash
# The GPU check (docs/testing.md): CUDA training throughput of yolov5s at 640 with AMP, a short real training run,
# COCO mAP of the imported yolov5n.pt on coco128, then that model served on the GPU at --max-batch 1 against 8.
# Run from the repository root with weights/yolov5n.pt and ../datasets/coco128 (docs/usage.md, "Data"):
#     scripts/gpu_check.sh [OUT_DIR]        (default runs/gpu_check; about 6 minutes on one H200)
# Before the first step it looks for every piece the steps need (a CUDA build of torch that sees a GPU, detect,
# fastapi and uvicorn, the weights and the data) and names each missing one with the command that installs it; a step
# whose pieces are missing is skipped, a failed step's log tail is printed, and the check goes on. It ends with a table
# of every step's status (exit status 1 unless every step passed). Record the printed img/s, memory and mAP in
# docs/benchmarks.md with the date and this command. GPU_CHECK_WEIGHTS, GPU_CHECK_DATA, GPU_CHECK_IMAGES, GPU_CHECK_SMALL=1
# (yolov5n at 64 px, a few batches: the figures mean nothing) and PYTHON override.
set -uo pipefail  # no -e: each step runs on its own (scripts/check_steps.sh)
source "$(dirname "$0")/check_steps.sh"
out=${1:-runs/gpu_check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python}
if [ "${GPU_CHECK_SMALL:-0}" = 1 ]; then
    cfg=yolov5n.yaml imgsz=64 batch=4 train_batch=4 val_batch=4 batches=2 rounds=1 workers=0 requests=8 concurrency=2
else
    cfg=yolov5s.yaml imgsz=640 batch=64 train_batch=32 val_batch=32 batches=16 rounds=3 workers=8 requests=240
    concurrency=16
fi
weights=${GPU_CHECK_WEIGHTS:-weights/yolov5n.pt}
data=${GPU_CHECK_DATA:-coco128.yaml}
images=${GPU_CHECK_IMAGES:-../datasets/coco128/images/train2017}

need python "a Python" "install Python 3.10 or newer, or point PYTHON at it" command -v "$PYTHON"
need detect "detect and torch" 'pip install -e . (from the repository root)' python_has torch detect
need cuda "a CUDA build of torch that sees a GPU" "install torch's CUDA wheel for your driver (pip install torch), then check nvidia-smi" \
    "$PYTHON" -c "import torch; assert torch.cuda.is_available()"
need serve "fastapi and uvicorn" 'pip install -e ".[serve]"' python_has fastapi uvicorn python_multipart
need weights "the weights" "put yolov5n.pt at $weights (nothing is downloaded; docs/usage.md, Data)" test -f "$weights"
need data "the images" "put coco128 at ../datasets/coco128 (docs/usage.md, Data)" test -d "$images"
preflight | tee "$out/preflight.txt"
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
    "$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>/dev/null \
        || echo "torch: not importable"
} | tee "$out/machine.txt"

# Model-only and end-to-end training img/s (forward, loss, backward, optimizer, AMP; loader with mosaic; EMA).
throughput() {
    "$PYTHON" scripts/bench_train.py --data "$data" --cfg "$cfg" --imgsz "$imgsz" --batch-size "$batch" \
        --workers "$workers" --device cuda --amp --batches "$batches" --rounds "$rounds"
}
# The whole trainer on CUDA: AMP with the GradScaler, EMA, validation, checkpoints, final evaluation.
training() {
    "$PYTHON" -m detect.train --cfg "$cfg" --data "$data" --imgsz "$imgsz" --batch-size "$train_batch" --epochs 2 \
        --device cuda --workers "$workers" --project "$out" --name train --exist-ok --no-progress
}
# COCO mAP of the official yolov5n weights on coco128 (the CPU at batch 32: mAP@0.5:0.95 0.365, mAP@0.5 0.567).
map() {
    "$PYTHON" -m detect.val --weights "$weights" --data "$data" --imgsz "$imgsz" --batch-size "$val_batch" \
        --device cuda --project "$out" --name val --exist-ok --no-progress
}
# Serving (docs/serve.md): the weights behind detect.serve on the GPU, --max-batch 1 then 8; the second server's img/s
# over the first's is the dynamic batching's gain, which a 2-core CPU cannot show.
serving() {
    "$PYTHON" scripts/bench_serve.py --images "$images" --requests "$requests" --concurrency "$concurrency" \
        --serve "$PYTHON -m detect.serve --weights $weights --device cuda --max-batch 1" \
        --serve "$PYTHON -m detect.serve --weights $weights --device cuda --max-batch 8"
}

step "1. training img/s, model only and end to end" "$out/bench_train.txt" "detect cuda data" "img/s" throughput
step "2. two epochs of the trainer on CUDA" "$out/train.txt" "detect cuda data" "^epoch|mAP50-95" training
step "3. mAP of $weights on the GPU" "$out/val.txt" "detect cuda weights data" "^ +all " map
step "4. serving on the GPU, --max-batch 1 then 8" "$out/serve.txt" "detect cuda weights data serve" "^server 2:" \
    serving
report | tee "$out/steps.md"
