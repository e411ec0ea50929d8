"""plot_results('runs/train/exp/results.csv'): yolov5's helper, results.png from a run's csv (ours, or yolov5's
with its space-padded headers), drawn by the code that draws it at the end of training."""

from __future__ import annotations

import pytest

from detect.errors import UserError
from detect.training.results_log import COLUMNS, PLOTTED, ResultsLog, plot_results


def test_results_png_from_our_csv_and_from_yolov5s(tmp_path):
    (tmp_path / "ours").mkdir()
    log = ResultsLog(tmp_path / "ours")
    for epoch in range(3):
        log.add({"epoch": epoch, **dict.fromkeys(PLOTTED, 1.0 / (epoch + 1))})
    log.close()
    assert plot_results(str(tmp_path / "ours" / "results.csv")) == tmp_path / "ours" / "results.png"
    assert (tmp_path / "ours" / "results.png").stat().st_size > 10_000
    yolov5 = tmp_path / "yolov5" / "results.csv"  # yolov5's columns, right-aligned in 20 characters
    yolov5.parent.mkdir()
    header = ["epoch", *PLOTTED, "val/box_loss", "val/obj_loss", "val/cls_loss", "x/lr0", "x/lr1", "x/lr2"]
    lines = [",".join(f"{name:>20}" for name in header)]
    lines += [",".join(f"{value:>20}" for value in [epoch, *[0.5] * (len(header) - 1)]) for epoch in range(2)]
    yolov5.write_text("\n".join(lines) + "\n")
    assert plot_results(yolov5).stat().st_size > 10_000
    assert COLUMNS[1:8] == PLOTTED


def test_a_missing_or_foreign_csv_is_one_line(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        plot_results(tmp_path / "results.csv")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="no column 'epoch'; not a results.csv of detect or yolov5"):
        plot_results(tmp_path / "other.csv")
