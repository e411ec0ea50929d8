"""scripts/structure_figures.py: the sizes a reader of detect/ meets, measured from the files (docs/architecture.md,
"Sizes")."""

from __future__ import annotations

import ast

from tests.scripts.modules import script
from tests.test_layering import PACKAGE

FIGURES = script("structure_figures")


def test_each_figure_is_the_files_own_largest_first():
    figures = FIGURES.figures(PACKAGE)
    assert dict(figures["modules per folder"])["detect/training"] == len(list((PACKAGE / "training").glob("*.py")))
    assert dict(figures["lines per module"])["detect/errors.py"] == len((PACKAGE / "errors.py").read_text().splitlines())
    epoch = next(node for node in ast.walk(ast.parse((PACKAGE / "training" / "epoch.py").read_text()))
                 if isinstance(node, ast.FunctionDef) and node.name == "train_one_epoch")
    lines = dict(figures["lines per function"])
    assert lines[f"detect/training/epoch.py:{epoch.lineno} train_one_epoch"] == epoch.end_lineno - epoch.lineno + 1
    parameters = dict(figures["parameters per public function"])
    assert parameters[f"detect/training/epoch.py:{epoch.lineno} train_one_epoch"] == 6
    assert not [name for name in parameters if name.rsplit(" ", 1)[1].startswith("_")]
    for rows in figures.values():
        assert [figure for _, figure in rows] == sorted((figure for _, figure in rows), reverse=True)


def test_it_prints_each_measure_with_its_guidance(capsys):
    assert FIGURES.main(["--top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if not line.startswith(" ")] == [
        f"{measure} ({guidance}):" for measure, guidance in FIGURES.GUIDANCE.items()]
    assert len(lines) == 4 * 3
