#!/usr/bin/env bash
# The NPU check (docs/ascend.md, "The NPU check"): what docs/benchmarks.md lacks for an Ascend 910B, in at most 10
# minutes on one Atlas 800T A2 card, and the 8-card training rate when 8 are present:
#   1. every op of the model's phases and where torch_npu 2.14 runs it (python -m detect.doctor --ops);
#   2. yolov5s@640 training img/s in fp16 and bf16, model only, one card (Huawei's port: 428.5 img/s, FP16, batch 64);
#   3. with several cards, the trainer's end-to-end img/s over all of them (the port: 3082.4 on 8, batch 512);
#   4. the imported yolov5s.pt's mAP on coco128 on the NPU against the CPU;
#   5. NMS time per validation batch on the NPU against the host;
#   6. the shapes (graphs) an epoch compiles, at a fixed size and with --multi-scale;
#   7. the .om export of yolov5s.pt (CANN's atc) and its mAP on the NPU;
#   8. serving on the NPU at --max-batch 1 against 8 (16 clients).
# Run from the repository root with weights/yolov5s.pt and ../datasets/coco128 (docs/usage.md, "Data"):
#     scripts/npu_check.sh [OUT_DIR]        (default runs/npu_check)
# Record the printed figures in docs/benchmarks.md with the date, the card and this command.
# NPU_CHECK_SMALL=1 shrinks every step (yolov5n at 64 px, a few steps) for the NPU stand-ins: CI runs it so
# (tests/scripts/test_npu_check.py); its figures mean nothing. NPU_CHECK_WEIGHTS, NPU_CHECK_DATA, NPU_CHECK_IMAGES,
# NPU_CHECK_SOC (the chip for atc, default Ascend910B3) and NPU_CHECK_PORT (the server's, default 8000) override.
set -euo pipefail
out=${1:-runs/npu_check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ "${NPU_CHECK_SMALL:-0}" = 1 ]; then
    cfg=yolov5n.yaml imgsz=64 batch=4 val_batch=4 steps=2 shapes_batch=4 large_images=16 requests=8 concurrency=2
else
    cfg=yolov5s.yaml imgsz=640 batch=64 val_batch=32 steps=20 shapes_batch=16 large_images=10240 requests=240
    concurrency=16
fi
weights=${NPU_CHECK_WEIGHTS:-weights/yolov5s.pt}
data=${NPU_CHECK_DATA:-coco128.yaml}
images=${NPU_CHECK_IMAGES:-../datasets/coco128/images/train2017}
soc=${NPU_CHECK_SOC:-Ascend910B3}
port=${NPU_CHECK_PORT:-8000}
cards=$(python -c "import torch_npu; print(torch_npu.npu.device_count())")
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    npu-smi info 2>/dev/null | head -n 12 || true
    python -c "import torch, torch_npu; print('torch', torch.__version__, 'torch_npu', torch_npu.__version__)"
    echo "NPUs: $cards"
} | tee "$out/machine.txt"

echo "== 1. ops of $cfg on the NPU"
python -m detect.doctor --ops --cfg "$cfg" > "$out/ops.txt"
tail -n 1 "$out/ops.txt"

echo "== 2. training img/s on one card, model only (fp16, bf16)"
python -m detect.tools.benchmark --cfg "$cfg" --imgsz "$imgsz" --batch-size "$batch" --device npu:0 \
    --precisions fp16 bf16 --warmup 3 --steps "$steps" --json "$out/benchmark.json" 2>&1 | tee "$out/benchmark.txt"

if [ "$cards" -gt 1 ]; then
    echo "== 3. training img/s on $cards cards, end to end (one epoch of synthetic COCO-like images)"
    python scripts/make_large_dataset.py "$out/large" --images "$large_images" --val-images 16 --workers 8 \
        > "$out/large.txt"
    python -m detect.train --cfg "$cfg" --data "$out/large/data.yaml" --imgsz "$imgsz" \
        --batch-size $((batch * cards)) --epochs 1 --noval --noplots --device "$(seq -s, 0 $((cards - 1)))" \
        --workers 8 --project "$out" --name "train$cards" --exist-ok --no-progress 2>&1 | tee "$out/train$cards.txt" \
        | grep "img/s"
fi

echo "== 4. mAP of $weights on $data: the NPU, then the CPU"
for device in npu:0 cpu; do
    python -m detect.val --weights "$weights" --data "$data" --imgsz "$imgsz" --batch-size "$val_batch" \
        --device "$device" --project "$out" --name "val_${device%%:*}" --exist-ok --no-progress 2>&1 \
        | tee "$out/val_${device%%:*}.txt" | grep -E "^ +all "
done

echo "== 5. NMS per validation batch: the NPU against the host"
python scripts/npu_nms_time.py --weights "$weights" --data "$data" --imgsz "$imgsz" --batch-size "$val_batch" \
    --device npu:0 2>&1 | tee "$out/nms.txt" | tail -n 1

echo "== 6. shapes an epoch compiles"
python scripts/npu_shapes.py --data "$data" --cfg "$cfg" --imgsz "$imgsz" --batch-size "$shapes_batch" \
    --device npu:0 2>&1 | tee "$out/shapes.txt" | grep -E "^[^ ]|shapes \("

echo "== 7. .om export ($soc) and its mAP on the NPU"
python -m detect.export --weights "$weights" --include om --imgsz "$imgsz" --batch-size 8 --soc-version "$soc" \
    --output-dir "$out/om" > "$out/export.txt" 2>&1
om=$(ls "$out"/om/*.om)
python -m detect.val --weights "$om" --data "$data" --imgsz "$imgsz" --batch-size 8 --device npu:0 \
    --project "$out" --name val_om --exist-ok --no-progress 2>&1 | tee "$out/val_om.txt" | grep -E "^ +all "

echo "== 8. serving on the NPU, --max-batch 1 then 8"
python scripts/bench_serve.py --images "$images" --requests "$requests" --concurrency "$concurrency" \
    --url "http://127.0.0.1:$port" \
    --serve "python -m detect.serve --weights $weights --device npu:0 --port $port --max-batch 1" \
    --serve "python -m detect.serve --weights $weights --device npu:0 --port $port --max-batch 8" 2>&1 \
    | tee "$out/serve.txt" | tail -n 4
