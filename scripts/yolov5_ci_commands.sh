#!/usr/bin/env bash
# yolov5's own CI, step "Test detection" (ultralytics/yolov5 .github/workflows/ci-testing.yml), run against detect:
# each script swapped for our module (train.py -> python -m detect.train, val.py -> detect.val, detect.py ->
# detect.predict, export.py -> detect.export, models/yolo.py -> detect.models, hubconf.py -> ours), every flag as
# written, plus --data coco128.yaml where yolov5 would download coco128, and our sample image for its bus.jpg.
# Usage: scripts/yolov5_ci_commands.sh WORK_DIR  (WORK_DIR/weights/yolov5n.pt: the official weights; coco128.yaml
# finds ../datasets/coco128 from WORK_DIR, so WORK_DIR sits beside datasets/, as in yolov5's layout).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$1"
m=yolov5n  # official weights
b=runs/train/exp/weights/best  # best.pt checkpoint
d="--data coco128.yaml"  # yolov5 downloads coco128 by default; ours is the built-in shapes set
python -m detect.train --imgsz 64 --batch 32 --weights $m.pt --cfg $m.yaml --epochs 1 --device cpu $d  # train
for d_ in cpu; do  # devices
  for w in $m $b; do  # weights
    python -m detect.val --imgsz 64 --batch 32 --weights "$w.pt" --device $d_ $d  # val
    python -m detect.predict --imgsz 64 --weights "$w.pt" --device $d_  # detect
  done
done
python "$repo/hubconf.py" --model $m  # hub
python -m detect.models --cfg $m.yaml  # build PyTorch model
python -m detect.export --weights $m.pt --img 64 --include torchscript  # export
python - <<PYTHON
import torch
from detect.inference.sample_images import sample_images
im = torch.zeros([1, 3, 64, 64])
for path in '$m', '$b':
    model = torch.hub.load('$repo', 'custom', path=path, source='local')
    print(model(str(sample_images()[0])))
    model(im)  # warmup, build grids for trace
    torch.jit.trace(model, [im])
PYTHON
echo "all of yolov5's Test detection commands ran"
