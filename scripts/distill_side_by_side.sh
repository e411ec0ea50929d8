#!/usr/bin/env bash
# Knowledge distillation measured (docs/benchmarks.md, "Distillation"): yolov5n students trained with a teacher
# (--teacher, the default feature term and hyp) and without it, the same epochs, flags and seeds, each scored on
# held-out images by one evaluator (pycocotools, through detect.val):
#   (a) the built-in shapes set: a yolov5s teacher trained here on its 300 train images, then the students; scored
#       on its 100 val images (generated apart from the train images);
#   (b) coco128: students from scratch on its first 96 images (by file name) with the official yolov5n.pt (trained
#       on all of COCO) as the teacher; scored on the other 32.
#
#   [PART=ab] [SEEDS="0 1"] scripts/distill_side_by_side.sh [WORK]
#
# Run from the repository root with our environment active, yolov5n.pt in weights/ (or WEIGHTS=path) and coco128 in
# ../datasets/coco128 (or COCO128=path; docs/usage.md, "Data"). WORK (default: a new temporary folder) keeps every
# run: a finished run is not trained again, so the script can be started again after a stop. Sizes for a 2-core CPU: IMGSZ_A 128,
# TEACHER_EPOCHS 40, EPOCHS_A 40; IMGSZ_B 256, EPOCHS_B 100; batch 16, 2 workers, --cache ram, validation after the
# last epoch only. Printed: the CPU and its load, then one table row per set and student (mAP@0.5 and @0.5:0.95:
# mean, spread (max - min) and each seed's; training img/s from results.csv; the teacher's cost line), each teacher's
# own scores, and whether the taught students' mean is above the others' by more than the spread.
set -euo pipefail

work=${1:-$(mktemp -d)}
part=${PART:-ab}
seeds=${SEEDS:-0 1}
weights=$(realpath "${WEIGHTS:-weights/yolov5n.pt}")
coco128=$(realpath "${COCO128:-../datasets/coco128}")
imgsz_a=${IMGSZ_A:-128} teacher_epochs=${TEACHER_EPOCHS:-40} epochs_a=${EPOCHS_A:-40}
imgsz_b=${IMGSZ_B:-256} epochs_b=${EPOCHS_B:-100}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
mkdir -p "$work"
python -c "from detect.backend.cpu import cpu_description; print(cpu_description())"  # what was measured on
uptime

train() {  # name flags...: one run (kept: a run of WORK that finished is not trained again)
  local name=$1
  shift
  if [ ! -f "$work/runs/$name/weights/best.pt" ] || ! grep -q "results saved" "$work/$name.log"; then
    python -m detect.train --device cpu --workers 2 --batch-size 16 --noval --noplots --cache ram --no-progress \
      --project "$work/runs" --name "$name" --exist-ok "$@" > "$work/$name.log" 2>&1 \
      || { tail -n 30 "$work/$name.log" >&2; return 1; }
  fi
  echo "$name: $(grep -o "(run [0-9.]* s)" "$work/$name.log" | tail -n 1 | tr -d "()")"
}

if [[ $part == *a* ]]; then
  train a-teacher --cfg yolov5s.yaml --data shapes.yaml --imgsz "$imgsz_a" --epochs "$teacher_epochs"
  for seed in $seeds; do
    train "a-alone-$seed" --cfg yolov5n.yaml --data shapes.yaml --imgsz "$imgsz_a" --epochs "$epochs_a" --seed "$seed"
    train "a-taught-$seed" --cfg yolov5n.yaml --data shapes.yaml --imgsz "$imgsz_a" --epochs "$epochs_a" \
      --seed "$seed" --teacher "$work/runs/a-teacher/weights/best.pt"
  done
fi

if [[ $part == *b* ]]; then
  split=$work/coco128-split  # the first 96 images by name to train on, the last 32 held out
  mkdir -p "$split"
  find "$coco128/images/train2017" -name "*.jpg" | sort > "$split/all.txt"
  head -n 96 "$split/all.txt" > "$split/train.txt"
  tail -n 32 "$split/all.txt" > "$split/val.txt"
  python - "$split" <<'EOF'
import sys
import yaml
from detect.data import load_data_config
names = list(load_data_config("coco128.yaml").names)  # the bundled yaml's 80 names, yolov5n.pt's
with open(f"{sys.argv[1]}/data.yaml", "w") as handle:
    yaml.safe_dump({"path": sys.argv[1], "train": "train.txt", "val": "val.txt", "names": names}, handle)
EOF
  for seed in $seeds; do
    train "b-alone-$seed" --cfg yolov5n.yaml --data "$split/data.yaml" --imgsz "$imgsz_b" --epochs "$epochs_b" \
      --seed "$seed"
    train "b-taught-$seed" --cfg yolov5n.yaml --data "$split/data.yaml" --imgsz "$imgsz_b" --epochs "$epochs_b" \
      --seed "$seed" --teacher "$weights"
  done
fi

python - "$work" "$part" "$seeds" "$imgsz_a" "$imgsz_b" "$weights" <<'EOF'
import csv, logging, re, statistics, sys
from pathlib import Path
from detect import val

work, part, seeds, imgsz_a, imgsz_b, weights = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(), *sys.argv[4:]
logging.disable(logging.WARNING)
sets = {"a": ("shapes", "shapes.yaml", int(imgsz_a), work / "runs/a-teacher/weights/best.pt"),
        "b": ("coco128 96/32", str(work / "coco128-split/data.yaml"), int(imgsz_b), Path(weights))}


def score(weights: Path, data: str, imgsz: int, name: str) -> tuple[float, float]:
    """(mAP@0.5, mAP@0.5:0.95) of `weights` on the set's held-out images, pycocotools through detect.val."""
    metrics = val.run(weights=[str(weights)], data=data, imgsz=imgsz, batch_size=32, device="cpu", workers=2,
                      evaluator="pycocotools", project=str(work / "val"), name=name, exist_ok=True,
                      progress=False).metrics
    return metrics.map50, metrics.map50_95


def rate(run: str) -> float:
    """The run's mean training img/s over its epochs (results.csv)."""
    with open(work / "runs" / run / "results.csv") as handle:
        return statistics.mean(float(row["train/img_per_s"]) for row in csv.DictReader(handle))


print("| set | student | mAP@0.5 mean (spread) | mAP@0.5:0.95 mean (spread) | per seed (0.5 / 0.5:0.95) | train img/s |")
print("|---|---|---|---|---|---|")
verdicts, costs, teachers = [], [], []
for key in part:
    label, data, imgsz, teacher = sets[key]
    teachers.append(f"{label}: teacher {teacher.name} scores {'%.3f / %.3f' % score(teacher, data, imgsz, f'{key}-teacher')}")
    means = {}
    for student in ("alone", "taught"):
        runs = [f"{key}-{student}-{seed}" for seed in seeds]
        maps = [score(work / "runs" / run / "weights/best.pt", data, imgsz, run) for run in runs]
        m50, m95 = [m[0] for m in maps], [m[1] for m in maps]
        means[student] = (statistics.mean(m50), max(m50) - min(m50), statistics.mean(m95), max(m95) - min(m95))
        each = ", ".join(f"{a:.3f} / {b:.3f}" for a, b in maps)
        print(f"| {label} | yolov5n {'with the teacher' if student == 'taught' else 'alone'} | {means[student][0]:.3f} "
              f"({means[student][1]:.3f}) | {means[student][2]:.3f} ({means[student][3]:.3f}) | {each} | "
              f"{statistics.mean(rate(run) for run in runs):.1f} |")
        if student == "taught":
            for run in runs:
                found = re.findall(r"distillation's cost: (.*)", (work / f"{run}.log").read_text())
                costs.append(f"{run}: {'; resumed: '.join(found) if found else '(no cost line)'}")  # one per set-up
    for index, what in ((0, "mAP@0.5"), (2, "mAP@0.5:0.95")):
        gain = means["taught"][index] - means["alone"][index]
        spread = max(means["taught"][index + 1], means["alone"][index + 1])
        # compared as printed, so that a gain of 0.000 is never "above" a spread of 0.000; one seed has no spread
        above = round(gain, 3) > round(spread, 3) and len(seeds) > 1
        verdicts.append(f"{label}, {what}: the teacher {'adds' if gain >= 0 else 'takes'} {abs(gain):.3f}, "
                        f"{'above' if above else 'not above'} the spread {spread:.3f}"
                        f"{'' if len(seeds) > 1 else ' (one seed: no spread to compare with)'}")
print("\n".join(["", *teachers, *costs, *verdicts]))
EOF
