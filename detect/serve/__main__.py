"""`python -m detect.serve --weights W`: an HTTP detection service with dynamic batching (docs/serve.md)."""

from __future__ import annotations

from detect import cli
from detect.errors import UserError
from detect.serve.settings import ServeSettings

parse_args = cli.settings_reader(ServeSettings, "python -m detect.serve", __doc__)


def run_service(settings: ServeSettings) -> None:
    """The CLI's body: serve until SIGTERM (exit 0) or Ctrl-C; one line naming the serve extra when it is missing."""
    try:
        from detect.serve.server import serve
    except ImportError as error:
        raise UserError(f'python -m detect.serve needs FastAPI and uvicorn: pip install "detect-trainer[serve]" '
                        f"({error})") from None
    serve(settings)


main = cli.main_for(parse_args, run_service)

if __name__ == "__main__":
    cli.exit_process(main())
