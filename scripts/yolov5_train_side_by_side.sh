#!/usr/bin/env bash
# Training side by side with ultralytics/yolov5 on this machine: the fine-tune of yolov5n.pt, each side with its
# default flags, in pairs that alternate which side runs first.
#
#   scripts/yolov5_train_side_by_side.sh YOLOV5_CHECKOUT [YOLOV5_PYTHON] [PAIRS] [EPOCHS]
#
# Run from the repository root with our environment active, coco128 in ../datasets/coco128 and yolov5n.pt in
# weights/. YOLOV5_CHECKOUT is a yolov5 working tree, YOLOV5_PYTHON the Python of an environment with its
# requirements.txt (default: python). The data: coco128's 128 train images four times (symlinks, labels copied), 512
# to train on, and its first 16 images to validate on; yolov5n at 320, batch 16, 2 loader workers, EPOCHS (10)
# epochs with validation after each. Each side's label cache is deleted before its run. Printed per run: the train
# rate (images over the training phase of the epochs: ours from results.csv, yolov5's from its progress bars), the
# wall time, and the best fitness (0.1 mAP@0.5 + 0.9 mAP@0.5:0.95) of each side's best.pt scored by one evaluator,
# detect.val's; then the ratios.
set -euo pipefail

checkout=$(cd "${1:?usage: $0 YOLOV5_CHECKOUT [YOLOV5_PYTHON] [PAIRS] [EPOCHS]}" && pwd)
yolov5_python=${2:-python}
pairs=${3:-1}
epochs=${4:-10}
weights=$(realpath weights/yolov5n.pt)
coco128=$(realpath ../datasets/coco128)
work=$(mktemp -d)
trap 'echo "failed: its runs are kept in $work" >&2' ERR
source "$(dirname "$0")/yolov5_offline.sh"  # no network for yolov5
python -c "from detect.backend.cpu import cpu_description; print(cpu_description())"  # what was measured on

python - "$coco128" "$work/data" <<'EOF'
import shutil, sys
from pathlib import Path
import yaml
from detect.config import CONFIGS_DIR
source, target = Path(sys.argv[1]), Path(sys.argv[2])
images = sorted((source / "images" / "train2017").glob("*.jpg"))
for split, copies, chosen in (("train", 4, images), ("val", 1, images[:16])):
    for folder in ("images", "labels"):
        (target / folder / split).mkdir(parents=True)
    for copy in range(copies):
        for image in chosen:
            (target / "images" / split / f"{copy}_{image.name}").symlink_to(image)
            label = source / "labels" / "train2017" / f"{image.stem}.txt"
            if label.is_file():
                shutil.copy(label, target / "labels" / split / f"{copy}_{image.stem}.txt")
names = yaml.safe_load((CONFIGS_DIR / "data" / "coco128.yaml").read_text())["names"]
(target / "data.yaml").write_text(yaml.safe_dump({"path": str(target), "train": "images/train", "val": "images/val",
                                                  "names": names}))
EOF

seconds() {  # wall seconds of a command, its output kept in $work/log
  local start end
  start=$(date +%s.%N)
  "$@" > "$work/log" 2>&1 || { tail -n 30 "$work/log" >&2; return 1; }
  end=$(date +%s.%N)
  python -c "print(f'{$end - $start:.1f}')"
}

run_ours() {
  find "$work/data" -name "*.cache" -delete
  seconds python -m detect.train --weights "$weights" --data "$work/data/data.yaml" --imgsz 320 --batch-size 16 \
    --workers 2 --epochs "$epochs" --device cpu --no-progress --project "$work/ours" --name "pair$1" > "$work/wall"
  walls+=("ours:$1:$(cat "$work/wall")")
  echo "ours pair $1: $(cat "$work/wall") s wall"
}

run_yolov5() {
  find "$work/data" -name "*.cache" -delete
  (cd "$checkout" && seconds "$yolov5_python" train.py --weights "$weights" --data "$work/data/data.yaml" --img 320 \
    --batch-size 16 --workers 2 --epochs "$epochs" --device cpu --project "$work/yolov5" --name "pair$1") > "$work/wall"
  cp "$work/log" "$work/yolov5/pair$1/train.log"
  walls+=("yolov5:$1:$(cat "$work/wall")")
  echo "yolov5 pair $1: $(cat "$work/wall") s wall"
}

walls=()
for pair in $(seq "$pairs"); do
  if (( pair % 2 )); then run_ours "$pair"; run_yolov5 "$pair"; else run_yolov5 "$pair"; run_ours "$pair"; fi
  uptime | sed 's/.*load/load/'
done

python - "$work" "$pairs" "${walls[@]}" <<'EOF'
import csv, re, sys
from pathlib import Path
from detect import val

work, pairs = Path(sys.argv[1]), int(sys.argv[2])
walls = {(side, int(pair)): float(wall) for side, pair, wall in (entry.split(":") for entry in sys.argv[3:])}
train_images = len(list((work / "data" / "images" / "train").iterdir()))


def fitness(weights: Path) -> float:
    return val.run(weights=str(weights), data=str(work / "data" / "data.yaml"), imgsz=320, batch_size=16,
                   device="cpu", project=str(work / "scored"), plots=False).metrics.fitness


def our_rate(run: Path) -> float:
    rates = [float(row["train/img_per_s"]) for row in csv.DictReader(open(run / "results.csv"))]
    return len(rates) * train_images / sum(train_images / rate for rate in rates)


def yolov5_rate(run: Path) -> float:
    """Images over the summed time of its training progress bars: the last state of each epoch's bar, as
    "  3/9   0G   0.04 ... 320: 100% ━━━━ 32/32 1.6it/s 20.3s" (the time as 20.3s, 1:02 or 1:02:03)."""
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", (run / "train.log").read_text()).replace("\r", "\n")
    ends = {}
    for epoch, done, total, elapsed in re.findall(r"^\s*(\d+)/\d+\s+\S+G\s.*: 100% \S+ (\d+)/(\d+) \S+ (\S+)$",
                                                  text, re.MULTILINE):
        if done == total:
            parts = [float(part) for part in elapsed.removesuffix("s").split(":")]
            ends[epoch] = sum(part * 60**power for power, part in enumerate(reversed(parts)))
    if not ends:
        raise SystemExit(f"{run / 'train.log'}: no finished epoch progress bar found")
    return len(ends) * train_images / sum(ends.values())


rows = []
for pair in range(1, pairs + 1):
    ours, theirs = work / "ours" / f"pair{pair}", work / "yolov5" / f"pair{pair}"
    rows.append((our_rate(ours), yolov5_rate(theirs), walls["ours", pair], walls["yolov5", pair],
                 fitness(ours / "weights" / "best.pt"), fitness(theirs / "weights" / "best.pt")))
for pair, (rate, their_rate, wall, their_wall, fit, their_fit) in enumerate(rows, 1):
    print(f"pair {pair}: train rate ours {rate:.1f} img/s, yolov5 {their_rate:.1f} ({rate / their_rate:.2f}x); "
          f"wall ours {wall:.1f} s, yolov5 {their_wall:.1f} s ({wall / their_wall:.2f}x); best.pt fitness by "
          f"detect.val: ours {fit:.4f}, yolov5 {their_fit:.4f}")
EOF
rm -rf "$work"
