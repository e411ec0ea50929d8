"""`python tests/serve/failing_model.py FLAGS`: `python -m detect.serve FLAGS` whose model fails every batch with an
error that holds SECRET, as an unexpected failure would (tests/serve/test_serve.py checks that no answer shows it)."""

from __future__ import annotations

import sys

SECRET = "secret-7f3a-from-inside-the-model"


def fail(_model: object, _images: object, _thresholds: object) -> None:
    raise RuntimeError(f"the model broke: {SECRET}")


if __name__ == "__main__":
    from detect import cli
    from detect.serve import engine
    from detect.serve.__main__ import main

    engine.ServedModel.warm_up = lambda _model: None  # the first batch to run is a request's
    engine.ServedModel.run = fail
    cli.exit_process(main(sys.argv[1:]))
