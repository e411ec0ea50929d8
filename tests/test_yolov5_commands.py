"""yolov5 users' own command lines run unchanged against detect, each script swapped for our module: the "Test
detection" step of yolov5's CI (scripts/yolov5_ci_commands.sh runs it) and the command lines of yolov5's README."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from detect import export, predict, train, val
from tests.shared_data import YOLOV5N, coco128_layout, needs_shared

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@needs_shared
def test_yolov5s_ci_test_detection_step_runs(tmp_path):
    work = coco128_layout(tmp_path)  # coco128.yaml finds ../datasets/coco128 from the working folder
    (work / "weights").mkdir()
    (work / "weights" / "yolov5n.pt").symlink_to(YOLOV5N)
    finished = subprocess.run(["bash", str(REPO / "scripts" / "yolov5_ci_commands.sh"), str(work)],
                              capture_output=True, text=True, timeout=900, check=False,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    assert "all of yolov5's Test detection commands ran" in finished.stdout
    assert (work / "runs" / "train" / "exp" / "weights" / "best.pt").is_file()
    assert (work / "weights" / "yolov5n.torchscript").is_file()


# yolov5's README (master 5081342f0), detection command lines with the script swapped; the datasets and weights they
# name need not exist: parsing them is what differs between a drop-in and a refusal.
README_LINES = [
    (train, "--data coco.yaml --epochs 300 --weights '' --cfg yolov5n.yaml --batch-size 128"),
    (train, "--data coco128.yaml --weights yolov5s.pt --img 640 --device 0,1,2,3"),
    (train, "--data coco.yaml --batch-size -1 --local_rank 0"),
    (val, "--data coco.yaml --img 640 --conf 0.001 --iou 0.65"),
    (val, "--data coco.yaml --img 640 --task speed --batch 1"),
    (val, "--data coco.yaml --img 1536 --iou 0.7 --augment"),
    (val, "--task study --data coco.yaml --iou 0.7 --weights yolov5n6.pt yolov5s6.pt yolov5m6.pt yolov5l6.pt yolov5x6.pt"),
    *[(predict, f"--weights yolov5s.pt --source {source}") for source in (
        "0", "img.jpg", "vid.mp4", "path/to/images/", "list.txt", "list.streams", "'path/to/*.jpg'",
        "'https://youtu.be/LNwODJXcvt4'", "'rtsp://example.com/media.mp4'")],
    (export, "--weights yolov5s.pt --include torchscript onnx --img 640"),
]


# yolov5's short spellings of our fields; any other --a-b flag is the field a_b.
FIELDS = {"--img": "imgsz", "--batch": "batch_size", "--conf": "conf_thres", "--iou": "iou_thres"}


def given_values(argv: list[str]) -> dict[str, list[str]]:
    """Each flag of a command line with the values after it: {"--img": ["640"], "--augment": []}."""
    given: dict[str, list[str]] = {}
    for token in argv:
        if token.startswith("--"):
            given[token] = []
        else:
            given[next(reversed(given))].append(token)
    return given


def holds(parsed, values: list[str]) -> bool:
    """Whether a parsed setting holds the command line's values (a flag without one: True)."""
    if not values:
        return parsed is True
    items = [str(item) for item in (parsed if isinstance(parsed, (tuple, list)) else (parsed,))]
    try:
        return [float(item) for item in items] == [float(value) for value in values]
    except ValueError:
        return items == values


@pytest.mark.parametrize("cli, line", README_LINES)
def test_yolov5s_readme_command_lines_parse_to_the_values_given(cli, line):
    argv = shlex.split(line)
    parsed = vars(cli.parse_args(argv))
    for flag, values in given_values(argv).items():
        field = FIELDS.get(flag, flag.lstrip("-").replace("-", "_"))
        assert field in parsed, f"{flag} was dropped: {sorted(parsed)}"
        assert holds(parsed[field], values), f"{flag} {values} parsed as {parsed[field]!r}"
