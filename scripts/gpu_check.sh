#!/usr/bin/env bash
# The GPU check (docs/testing.md): CUDA training throughput of yolov5s at 640 with AMP, a short real training run,
# COCO mAP of the imported yolov5n.pt on coco128, then that model served on the GPU at --max-batch 1 against 8.
# Run from the repository root with weights/yolov5n.pt and ../datasets/coco128 (docs/usage.md, "Data"):
#     scripts/gpu_check.sh [OUT_DIR]        (default runs/gpu_check; about 6 minutes on one H200)
# Record the printed img/s, memory and mAP in docs/benchmarks.md with the date and this command.
set -euo pipefail
out=${1:-runs/gpu_check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
} | tee "$out/machine.txt"

# Model-only and end-to-end training img/s (forward, loss, backward, optimizer, AMP; loader with mosaic; EMA).
python scripts/bench_train.py --data coco128.yaml --cfg yolov5s.yaml --imgsz 640 --batch-size 64 --workers 8 \
    --device cuda --amp --batches 16 --rounds 3 2>&1 | tee "$out/bench_train.txt"

# The whole trainer on CUDA: AMP with the GradScaler, EMA, validation, checkpoints, final evaluation.
python -m detect.train --cfg yolov5s.yaml --data coco128.yaml --imgsz 640 --batch-size 32 --epochs 2 \
    --device cuda --workers 8 --project "$out" --name train --exist-ok --no-progress 2>&1 | tee "$out/train.txt"

# COCO mAP of the official yolov5n weights on coco128 (the CPU at batch 32: mAP@0.5:0.95 0.365, mAP@0.5 0.567).
python -m detect.val --weights weights/yolov5n.pt --data coco128.yaml --imgsz 640 --batch-size 32 \
    --device cuda --project "$out" --name val --exist-ok --no-progress 2>&1 | tee "$out/val.txt"

# Serving (docs/serve.md): yolov5n.pt behind detect.serve on the GPU, 16 clients, --max-batch 1 then 8; the
# second server's img/s over the first's is the dynamic batching's gain, which a 2-core CPU cannot show.
python scripts/bench_serve.py --images ../datasets/coco128/images/train2017 --requests 240 --concurrency 16 \
    --serve "python -m detect.serve --weights weights/yolov5n.pt --device cuda --max-batch 1" \
    --serve "python -m detect.serve --weights weights/yolov5n.pt --device cuda --max-batch 8" 2>&1 \
    | tee "$out/serve.txt"
