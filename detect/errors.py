"""Errors a user can cause and fix: the CLIs print them as one line and exit with code 2."""


class UserError(Exception):
    """A problem with the user's input, environment or files, stated in one line."""


class ConfigError(UserError):
    """A config file (model, data or hyp yaml) that is missing, malformed or has a bad key."""


def one_line(error: BaseException, limit: int = 300) -> str:
    """An exception as one short line: its type and its message with the whitespace collapsed."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Interrupted(Exception):
    """A run stopped by a signal after saving what it needs to resume; the CLIs print the message, exit 128 + signal."""

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number
