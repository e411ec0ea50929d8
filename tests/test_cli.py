"""The shared CLI pieces: range-checked flag types, one-line argparse errors with exit code 2 in every CLI, and the
end of a run stopped by a signal."""

from __future__ import annotations

import argparse
import gc
import importlib
import signal
import subprocess
import sys
import time

import pytest
import torch

from detect import cli
from detect.data.__main__ import main as data_main
from detect.errors import UserError
from detect.models.__main__ import main as models_main


@pytest.mark.parametrize("kind, good, bad", [
    (cli.positive_int, {"1": 1, "640": 640}, ["0", "-5", "2.5", "x", ""]),
    (cli.non_negative_int, {"0": 0, "8": 8}, ["-1", "1e3", "many"]),
    (cli.unit_float, {"0": 0.0, "1": 1.0, "0.25": 0.25, "1e-3": 0.001}, ["-0.1", "1.5", "2", "nan", "inf", "x"]),
])
def test_range_types(kind, good: dict, bad: list) -> None:
    for text, value in good.items():
        assert kind(text) == value and type(kind(text)) is type(value)
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match=f"^must be .*, got {text!r}$"):
            kind(text)


def test_parser_errors_are_one_line_and_exit_2(capsys) -> None:
    parser = cli.ArgumentParser(prog="tool")
    parser.add_argument("--size", type=cli.positive_int, required=True)
    for argv, message in [([], "the following arguments are required: --size"),
                          (["--size", "-3"], "argument --size: must be a positive integer, got '-3'"),
                          (["--size", "3", "--colour"], "unrecognized arguments: --colour")]:
        with pytest.raises(SystemExit) as stopped:
            parser.parse_args(argv)
        assert stopped.value.code == 2
        assert capsys.readouterr().err == f"error: {message}\n"


@pytest.mark.parametrize("main, argv, message", [
    (models_main, ["--imgsz", "-5"], "argument --imgsz: must be an integer in [1, 8192], got '-5'"),
    (models_main, ["--nc", "0"], "argument --nc: must be a positive integer, got '0'"),
    (data_main, ["--imgsz", "0"], "argument --imgsz: must be an integer in [1, 8192], got '0'"),
    (data_main, ["--batch-size", "-2"], "argument --batch-size: must be a positive integer, got '-2'"),
])
def test_models_and_data_clis_check_ranges_first(capsys, main, argv, message) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert capsys.readouterr().err == f"error: {message}\n"


@pytest.mark.parametrize("module, flag", [
    ("detect.train", "--imgsz"), ("detect.val", "--imgsz"), ("detect.val", "--study-sizes"),
    ("detect.predict", "--imgsz"), ("detect.export", "--imgsz"), ("detect.models.__main__", "--imgsz"),
    ("detect.data.__main__", "--imgsz"), ("detect.tools.compare", "--imgsz"), ("detect.tools.benchmark", "--imgsz"),
])
def test_every_image_size_flag_has_a_bound(capsys, module, flag) -> None:
    """Past MAX_IMGSZ (8192) an input could only exhaust the memory: predict --imgsz 100000 grew past 8 GB."""
    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(module).main([flag, "100000"])
    assert stopped.value.code == 2
    assert f"argument {flag}: must be an integer in [" in capsys.readouterr().err


class _Unreadable(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int):
        raise UserError("10 images in a row could not be read (the last: x.jpg)")


def test_a_user_error_from_a_loader_worker_is_still_one_line(capsys) -> None:
    loader = torch.utils.data.DataLoader(_Unreadable(), num_workers=1)
    assert cli.run(lambda: list(loader)) == 2
    assert capsys.readouterr().err == "error: 10 images in a row could not be read (the last: x.jpg)\n"


def test_a_ctrl_c_while_a_stopped_run_winds_down_ends_it_at_once() -> None:
    # The stop's Ctrl-C has come and gone; another one arrives in an exit hook (where torch's own hooks run).
    script = ("import atexit, os, signal, time\n"
              "from detect import cli\n"
              "from detect.errors import Interrupted\n"
              "def stopped():\n"
              "    raise Interrupted('stopped at epoch 1, batch 2/4', signal.SIGINT)\n"
              "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(30)))\n"
              "raise SystemExit(cli.run(stopped))\n")
    began = time.monotonic()
    finished = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 130 and time.monotonic() - began < 20, finished.stderr
    assert finished.stderr.strip() == "stopped at epoch 1, batch 2/4"


def test_an_error_raised_while_a_ctrl_c_unwinds_is_still_an_interrupt(capsys) -> None:
    # A Ctrl-C inside torch.save: its zip writer then fails on closing, and that error carries the interrupt along.
    def saving() -> None:
        try:
            raise KeyboardInterrupt
        finally:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos")

    previous = signal.getsignal(signal.SIGINT)
    try:
        assert cli.run(saving) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    assert capsys.readouterr().err.strip() == "interrupted"
    with pytest.raises(RuntimeError):
        cli.run(lambda: (_ for _ in ()).throw(RuntimeError("a plain failure")))


def test_a_cli_process_exits_with_its_code_and_skips_the_shutdown_collection() -> None:
    try:
        with pytest.raises(SystemExit) as ended:
            cli.exit_process(3)
        assert ended.value.code == 3 and gc.get_freeze_count() > 0  # frozen objects are never collected
    finally:
        gc.unfreeze()
    # the whole path, as a user runs it: a UserError's exit code survives it
    result = subprocess.run([sys.executable, "-m", "detect.models", "--cfg", "no-such-model.yaml"],
                            check=False, capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("error: "), result.stderr


class Writes:
    """A stderr that records each write it is given."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_an_error_line_is_one_write_so_that_ranks_sharing_stderr_never_join_lines(monkeypatch):
    # print() writes the text and its newline apart; an unbuffered stderr (PYTHONUNBUFFERED=1) passed them on as two
    # writes, and two ranks failing at once wrote `error: Aerror: A` and two newlines.
    stream = Writes()
    monkeypatch.setattr(sys, "stderr", stream)

    def body() -> None:
        raise UserError("missing.yaml: no such file")

    assert cli.run(body) == 2
    assert stream.writes == ["error: missing.yaml: no such file\n"]
