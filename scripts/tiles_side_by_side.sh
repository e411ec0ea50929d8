#!/usr/bin/env bash
# Small objects in large images: yolov5n fine-tuned the usual way at 640 against fine-tuned on tiles of TILE px
# (--tile TILE --imgsz TILE; TILE=640 by default), each scored plain (the image fitted into 640) and sliced (--slice
# TILE), on the same held-out images.
#
#   [TILE=320] scripts/tiles_side_by_side.sh [TILED_EPOCHS] [WORK]
#
# Run from the repository root with our environment active and yolov5n.pt in weights/ (or WEIGHTS=path). The data:
# scripts/make_tiles_dataset.py's synthetic set (seed 0), 8 train and 4 val canvases of 2048-3072 px with 20-40
# objects of 8-32 px each, in WORK (default: a new temporary folder). Both runs start from yolov5n.pt at batch 8, 2
# loader workers, --cache ram, validation after the last epoch only; the budget is the same number of training
# pixels: TILED_EPOCHS (6) epochs over the windows, and as many epochs over the whole images (at 640) as give that
# many pixels (the same samples when TILE is 640, a quarter as many at 320). Printed: the CPU, each run's training
# wall time, then per model and inference: mAP@0.5 and mAP@0.5:0.95 of the objects under 32 px (COCO's "small",
# pycocotools on val's predictions.json), images per second (val's pre-process + inference + NMS) and the scoring's
# wall time; with `sahi` importable, SAHI's sliced inference of the tiled model too (scripts/sahi_sliced.py: its
# get_sliced_prediction, TILE px slices, overlap 0.2, our model behind its DetectionModel), run by SAHI_PYTHON
# (default: python) where that Python imports sahi.
set -euo pipefail

tiled_epochs=${1:-6}
tile=${TILE:-640}
work=${2:-$(mktemp -d)}
weights=$(realpath "${WEIGHTS:-weights/yolov5n.pt}")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
python -c "from detect.backend.cpu import cpu_description; print(cpu_description())"  # what was measured on
[ -f "$work/data/data.yaml" ] || python scripts/make_tiles_dataset.py "$work/data" --sides 2048 3072 > /dev/null
data=$work/data/data.yaml

# the plain run's epochs: as many pixels as the tiled run's windows give over TILED_EPOCHS
plain_epochs=$(python - "$data" "$tiled_epochs" "$tile" <<'EOF'
import sys
from detect.data import load_data_config, load_split
from detect.data.tiles.windows import TileSettings, expand_windows
tile = int(sys.argv[3])
split = load_split(load_data_config(sys.argv[1]), "train")
windows = expand_windows(split.records, TileSettings(tile), seed=0)
print(max(1, round(int(sys.argv[2]) * len(windows.records) * (tile / 640) ** 2 / len(split.records))))
EOF
)

train() {  # name epochs imgsz flags...: one training run (kept: a finished run in WORK is not trained again); its wall
  local name=$1 epochs=$2 imgsz=$3
  shift 3
  if [ ! -f "$work/runs/$name/weights/best.pt" ] || ! grep -q "(run " "$work/$name.log"; then
    python -m detect.train --weights "$weights" --data "$data" --imgsz "$imgsz" --batch-size 8 --workers 2 \
      --epochs "$epochs" --device cpu --noval --noplots --cache ram --no-progress --project "$work/runs" \
      --name "$name" --exist-ok "$@" > "$work/$name.log" 2>&1 || { tail -n 30 "$work/$name.log" >&2; return 1; }
  fi
  grep -o "(run [0-9.]* s)" "$work/$name.log" | tail -n 1 | tr -d "()"  # the run's own wall time, from its phases line
}

plain_wall=$(train plain "$plain_epochs" 640)
tiled_wall=$(train tiles "$tiled_epochs" "$tile" --tile "$tile")
echo "training: plain $plain_epochs epochs of 8 images at 640, $plain_wall; tiles $tiled_epochs epochs of the" \
  "$tile px windows, $tiled_wall"

python - "$work" "$data" "$tile" <<'EOF'
import contextlib, io, json, logging, os, subprocess, sys, time
from pathlib import Path
import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from detect import val

work, data, tile = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
logging.disable(logging.WARNING)


def small_maps(ground_truth: Path, predictions: list[dict]) -> tuple[float, float]:
    """(mAP@0.5, mAP@0.5:0.95) over the objects under 32 x 32 px (COCO's 'small' area range)."""
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools' progress lines
        truth = COCO(str(ground_truth))
        found = truth.loadRes(predictions) if predictions else COCO()
        evaluation = COCOeval(truth, found, "bbox")
        evaluation.evaluate(), evaluation.accumulate()
    precision = evaluation.eval["precision"][:, :, :, 1, 2]  # IoU x recall x class, area small, 100 detections
    valid = lambda values: float(values[values > -1].mean()) if (values > -1).any() else 0.0  # noqa: E731
    return valid(precision[0]), valid(precision)


rows = []
for trained in ("plain", "tiles"):
    best = work / "runs" / trained / "weights" / "best.pt"
    for inference, imgsz, options in (("plain", 640, {}), ("sliced", tile, {"slice": tile})):
        start = time.perf_counter()
        result = val.run(weights=str(best), data=data, imgsz=imgsz, batch_size=8, device="cpu", save_json=True,
                         project=str(work / "val"), name=f"{trained}-{inference}", exist_ok=True, progress=False,
                         **options)
        wall = time.perf_counter() - start
        folder = work / "val" / f"{trained}-{inference}"
        predictions = json.loads((folder / "predictions.json").read_text())
        speed = result.speed
        per_image = speed.preprocess + speed.inference + speed.nms
        maps = small_maps(folder / "ground_truth.json", predictions)
        rows.append((trained, inference, *maps, 1000 / per_image, wall))

sahi_python = os.environ.get("SAHI_PYTHON", sys.executable)
if subprocess.run([sahi_python, "-c", "import sahi"], capture_output=True).returncode == 0:
    truth = work / "val" / "tiles-sliced" / "ground_truth.json"
    start = time.perf_counter()
    done = subprocess.run([sahi_python, "scripts/sahi_sliced.py", str(work / "runs" / "tiles" / "weights" / "best.pt"),
                           str(truth), str(work / "data" / "images" / "val"), str(tile)], capture_output=True,
                          text=True)
    images = len(json.loads(truth.read_text())["images"])
    if done.returncode:
        print(f"sahi failed, its row is left out: {done.stderr.strip().splitlines()[-1]}")
    else:
        rows.append(("tiles", "sahi sliced", *small_maps(truth, json.loads(done.stdout)),
                     images / float(done.stderr.strip().splitlines()[-1]), time.perf_counter() - start))
else:
    print(f"sahi is not importable by {sahi_python} (SAHI_PYTHON): its row is left out")

print(f"{'trained':<8} {'inference':<12} {'mAP50 <32px':>12} {'mAP50-95 <32px':>15} {'img/s':>7} {'wall s':>7}")
for trained, inference, map50, map50_95, rate, wall in rows:
    print(f"{trained:<8} {inference:<12} {map50:>12.3f} {map50_95:>15.3f} {rate:>7.2f} {wall:>7.1f}")
EOF
