"""XML read without a DTD: a file that declares one (and so could declare entities: the "billion laughs" expansion,
an external file pulled in) is refused before anything in it is expanded or opened."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree
from xml.parsers import expat

from detect.errors import UserError


class _Refused(Exception):
    """A DTD or entity declaration met by the parser."""


def _refuse(*_: object) -> None:
    raise _Refused


def read_xml(path: Path) -> ElementTree.Element:
    """The root element of `path`; a DTD, an entity declaration or a syntax error is one UserError naming the file."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(f"{path}: cannot read ({error.strerror or error})") from None
    builder = ElementTree.TreeBuilder()
    parser = expat.ParserCreate()
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    parser.StartDoctypeDeclHandler = _refuse
    parser.EntityDeclHandler = _refuse
    parser.ExternalEntityRefHandler = _refuse
    try:
        parser.Parse(data, True)
        return builder.close()
    except _Refused:
        raise UserError(f"{path}: XML with a DTD or entity declaration is refused (labelling tools write none)") from None
    except (expat.ExpatError, AssertionError) as error:  # TreeBuilder.close asserts a root element was seen
        raise UserError(f"{path}: not well-formed XML ({error or 'no root element'})") from None
