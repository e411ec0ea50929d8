"""A data yaml's splits are checked with the other inputs: a missing folder stops train before any work."""

from __future__ import annotations

import pytest

from detect import train
from tests.data.helpers import write_yaml
from tests.training.helpers import tiny_dataset, train_args


@pytest.mark.parametrize("split", ["val", "train"])
def test_a_missing_split_folder_is_one_line_before_the_label_check(tmp_path, capsys, split):
    root = tmp_path / "data"
    tiny_dataset(root, count=4)
    data = write_yaml(root, **{split: "images/missing"})
    code = train.main(train_args(data, tmp_path / "runs", epochs=1))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    # The yaml, its key and the folder it names.
    assert f"{data}: '{split}' names {root / 'images' / 'missing'}, which does not exist" in err
    assert not (tmp_path / "runs").exists()  # no run folder, and no label check (its cache) of either split
    assert not list(root.rglob("*.cache"))
