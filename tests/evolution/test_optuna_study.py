import collections
import subprocess
import sys
import textwrap
import time

import pytest

from detect.evolution.optuna_study import open_storage
from tests.shared_data import REPO

optuna = pytest.importorskip("optuna")



def test_processes_asking_together_never_take_the_same_queued_trial(tmp_path):
    # Optuna claims a queued trial with SELECT ... FOR UPDATE, which SQLite ignores: on the plain storage four
    # processes asking at the same instant took one trial twice about 5 times in 40 asks; they must never.
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="race", storage=open_storage(optuna, url, lambda trial: None))
    for number in range(40):
        study.enqueue_trial({"x": number})
    start = time.time() + 4  # every process has imported Optuna and opened the database by then
    script = textwrap.dedent(f"""
        import time, warnings
        import optuna
        from detect.evolution.optuna_study import open_storage
        warnings.simplefilter("ignore")
        study = optuna.load_study(study_name="race", storage=open_storage(optuna, {url!r}, lambda trial: None))
        while time.time() < {start}:
            pass
        print(*[study.ask().number for _ in range(10)])
    """)
    processes = [subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [process.returncode for process in processes] == [0] * 4, [err for _, err in outputs]
    taken = collections.Counter(number for out, _ in outputs for number in out.split())
    assert sorted(taken.values()) == [1] * 40, {number: times for number, times in taken.items() if times > 1}
