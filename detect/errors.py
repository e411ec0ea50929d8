"""Errors a user can cause and fix: the CLIs print them as one line and exit with code 2."""

import reprlib
from collections.abc import Iterable


class UserError(Exception):
    """A problem with the user's input, environment or files, stated in one line."""


class ConfigError(UserError):
    """A config file (model, data or hyp yaml) that is missing, malformed or has a bad key."""


def refuse_unknown_keys(mapping: Iterable[str], known: Iterable[str], where: str, known_as: str = "known") -> None:
    """ConfigError `<where> unknown key '<key>' (<known_as>: ...)` for the first (sorted) key of `mapping` that is not
    `known`."""
    known = list(known)
    unknown = sorted(set(mapping) - set(known))
    if unknown:
        raise ConfigError(f"{where} unknown key '{unknown[0]}' ({known_as}: {', '.join(known)})")


def one_line(error: BaseException, limit: int = 300) -> str:
    """An exception as one short line: its type and its message with the whitespace collapsed."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_repr(value: object) -> str:
    """repr of a user's value for an error message, cut short (four items a level, two levels, 60 characters a
    string or number), so that a huge or deeply nested value, as a yaml alias bomb gives, costs nothing to show."""
    shortener = reprlib.Repr()
    shortener.maxlevel = 2
    shortener.maxtuple = shortener.maxlist = shortener.maxarray = shortener.maxset = shortener.maxfrozenset = 4
    shortener.maxdeque = shortener.maxdict = 4
    shortener.maxstring = shortener.maxother = shortener.maxlong = 60
    return shortener.repr(value)


class Interrupted(Exception):
    """A run stopped by a signal after saving what it needs to resume; the CLIs print the message, exit 128 + signal."""

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number
