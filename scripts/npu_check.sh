#!/usr/bin/env bash
# The NPU check (docs/ascend.md, "The NPU check"): what docs/benchmarks.md lacks for an Ascend 910B, in at most 10
# minutes on one Atlas 800T A2 card, and the 8-card training rate when 8 are present:
#   1. every op of the model's phases and where the installed torch_npu runs it (python -m detect.doctor --ops);
#   2. yolov5s@640 training img/s in fp16 and bf16, model only, one card (Huawei's port: 428.5 img/s, FP16, batch 64);
#   3. with several cards, the trainer's end-to-end img/s over all of them (the port: 3082.4 on 8, batch 512);
#   4. the imported yolov5s.pt's mAP on coco128 on the NPU against the CPU;
#   5. NMS of a validation batch on the NPU against the host, and which --nms-device to use (doctor --nms);
#   6. the shapes (graphs) an epoch compiles, at a fixed size and with --multi-scale;
#   7. the .om export of yolov5s.pt for the card's own chip (read from it; CANN's atc) and its mAP on the NPU;
#   8. serving on the NPU at --max-batch 1 against 8 (16 clients).
# Run from the repository root with weights/yolov5s.pt and ../datasets/coco128 (docs/usage.md, "Data"):
#     scripts/npu_check.sh [OUT_DIR]        (default runs/npu_check)
# Before step 1 it looks for every piece the steps need (CANN sourced, torch_npu and an NPU, onnx, ais_bench and
# aclruntime, pyACL, atc, fastapi and uvicorn, the weights and the data) and names each missing one with the command
# that installs it; a step whose pieces are missing is skipped, a failed step's log tail is printed, and the check goes
# on. It ends with a table of every step's status (exit status 1 unless every step passed); each step's output is in
# OUT_DIR/<step>.txt. Record the printed figures in docs/benchmarks.md with the date, the card and this command.
# NPU_CHECK_SMALL=1 shrinks every step (yolov5n at 64 px, a few steps) for the NPU stand-ins: CI runs it so
# (tests/scripts/test_npu_check.py); its figures mean nothing. NPU_CHECK_WEIGHTS, NPU_CHECK_DATA, NPU_CHECK_IMAGES,
# NPU_CHECK_SOC (the chip for atc; default: the card's own), NPU_CHECK_PORT (the server's, default 8000) and PYTHON
# override.
set -uo pipefail  # no -e: each step runs on its own (scripts/check_steps.sh)
source "$(dirname "$0")/check_steps.sh"
out=${1:-runs/npu_check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python}
if [ "${NPU_CHECK_SMALL:-0}" = 1 ]; then
    cfg=yolov5n.yaml imgsz=64 batch=4 val_batch=4 steps=2 shapes_batch=4 large_images=16 requests=8 concurrency=2
else
    cfg=yolov5s.yaml imgsz=640 batch=64 val_batch=32 steps=20 shapes_batch=16 large_images=10240 requests=240
    concurrency=16
fi
weights=${NPU_CHECK_WEIGHTS:-weights/yolov5s.pt}
data=${NPU_CHECK_DATA:-coco128.yaml}
images=${NPU_CHECK_IMAGES:-../datasets/coco128/images/train2017}
port=${NPU_CHECK_PORT:-8000}
soc=()
[ -n "${NPU_CHECK_SOC:-}" ] && soc=(--soc-version "$NPU_CHECK_SOC")

need python "a Python" "install Python 3.10 or newer, or point PYTHON at it" command -v "$PYTHON"
need detect "detect and torch" 'pip install -e . (from the repository root)' python_has torch detect
need cann "CANN's environment" "source /usr/local/Ascend/ascend-toolkit/set_env.sh (your CANN install's set_env.sh)" \
    test -n "${ASCEND_HOME_PATH:-}"
need npu "torch_npu and an NPU it sees" 'pip install -e ".[npu]" (the torch_npu that pairs with your CANN: python -m detect.doctor), then check npu-smi info' \
    "$PYTHON" -c "import torch_npu; assert torch_npu.npu.device_count() > 0"
need onnx "onnx and onnxruntime" 'pip install -e ".[export]"' python_has onnx onnxruntime
need ais_bench "ais_bench and aclruntime" "pip install the aclruntime and ais_bench wheels of Huawei's ait (gitee.com/ascend/ait, components/benchmark)" \
    python_has ais_bench aclruntime
need pyacl "CANN's pyACL (import acl)" "source CANN's set_env.sh (it puts python/site-packages on PYTHONPATH)" python_has acl
need atc "CANN's atc" "source CANN's set_env.sh (the toolkit puts atc on PATH)" command -v atc
need serve "fastapi and uvicorn" 'pip install -e ".[serve]"' python_has fastapi uvicorn python_multipart
need weights "the weights" "put yolov5s.pt at $weights (nothing is downloaded; docs/usage.md, Data)" test -f "$weights"
need data "the images" "put coco128 at ../datasets/coco128 (docs/usage.md, Data)" test -d "$images"
preflight | tee "$out/preflight.txt"

cards=0
[ "${HAVE[npu]}" = 1 ] && cards=$("$PYTHON" -c "import torch_npu; print(torch_npu.npu.device_count())")
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    npu-smi info 2>/dev/null | head -n 12 || true
    "$PYTHON" -c "import torch; print('torch', torch.__version__)" 2>/dev/null || echo "torch: not importable"
    if [ "${HAVE[npu]}" = 1 ]; then
        "$PYTHON" -c "import torch_npu; print('torch_npu', torch_npu.__version__, 'chip', torch_npu.npu.get_device_name(0))"
    fi
    echo "NPUs: $cards"
} | tee "$out/machine.txt"

ops() { "$PYTHON" -m detect.doctor --ops --cfg "$cfg"; }
benchmark() {
    "$PYTHON" -m detect.tools.benchmark --cfg "$cfg" --imgsz "$imgsz" --batch-size "$batch" --device npu:0 \
        --precisions fp16 bf16 --warmup 3 --steps "$steps" --json "$out/benchmark.json"
}
cards_train() {
    "$PYTHON" scripts/make_large_dataset.py "$out/large" --images "$large_images" --val-images 16 --workers 8
    "$PYTHON" -m detect.train --cfg "$cfg" --data "$out/large/data.yaml" --imgsz "$imgsz" \
        --batch-size $((batch * cards)) --epochs 1 --noval --noplots --device "$(seq -s, 0 $((cards - 1)))" \
        --workers 8 --project "$out" --name "train$cards" --exist-ok --no-progress
}
map() {
    local device
    for device in npu:0 cpu; do
        echo "--device $device"
        "$PYTHON" -m detect.val --weights "$weights" --data "$data" --imgsz "$imgsz" --batch-size "$val_batch" \
            --device "$device" --project "$out" --name "val_${device%%:*}" --exist-ok --no-progress
    done
}
nms() {
    "$PYTHON" -m detect.doctor --nms --weights "$weights" --data "$data" --imgsz "$imgsz" --batch-size "$val_batch" \
        --device npu:0
}
shapes() {
    "$PYTHON" scripts/npu_shapes.py --data "$data" --cfg "$cfg" --imgsz "$imgsz" --batch-size "$shapes_batch" \
        --device npu:0
}
om() {
    local stem
    stem=$(basename "${weights%.*}")
    # traced on the CPU, as export does by default; without NPU_CHECK_SOC the chip is read from the card
    "$PYTHON" -m detect.export --weights "$weights" --include om --imgsz "$imgsz" --batch-size 8 "${soc[@]}" \
        --output-dir "$out/om"
    test -f "$out/om/$stem.om" || { echo "no $out/om/$stem.om was written"; return 1; }
    "$PYTHON" -m detect.val --weights "$out/om/$stem.om" --data "$data" --imgsz "$imgsz" --batch-size 8 \
        --device npu:0 --project "$out" --name val_om --exist-ok --no-progress
}
serving() {
    "$PYTHON" scripts/bench_serve.py --images "$images" --requests "$requests" --concurrency "$concurrency" \
        --url "http://127.0.0.1:$port" \
        --serve "$PYTHON -m detect.serve --weights $weights --device npu:0 --port $port --max-batch 1" \
        --serve "$PYTHON -m detect.serve --weights $weights --device npu:0 --port $port --max-batch 8"
}

step "1. ops of $cfg on the NPU" "$out/ops.txt" "detect" "^verdict" ops
step "2. training img/s on one card (fp16, bf16)" "$out/benchmark.txt" "detect npu" "^\| train " benchmark
if [ "$cards" = 1 ]; then
    not_run "3. training img/s on several cards, end to end" "one card"
else
    step "3. training img/s on $cards cards, end to end" "$out/train$cards.txt" "detect npu" "img/s" cards_train
fi
step "4. mAP of $weights on the NPU, then the CPU" "$out/val.txt" "detect npu weights data" "^--device|^ +all " map
step "5. NMS on the NPU against the host" "$out/nms.txt" "detect npu weights data" "^NMS|^verdict" nms
step "6. shapes an epoch compiles" "$out/shapes.txt" "detect npu data" "^[^ ]|shapes \(" shapes
step "7. .om export for the card's chip and its mAP" "$out/om.txt" "detect npu weights data onnx ais_bench pyacl atc" \
    "^ +all |om: for" om
step "8. serving on the NPU, --max-batch 1 then 8" "$out/serve.txt" "detect npu weights data serve" "^server 2:" serving
report | tee "$out/steps.md"
