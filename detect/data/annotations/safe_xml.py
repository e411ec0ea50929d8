"""XML read without a DTD: a file that declares one (and so could declare entities: the "billion laughs" expansion,
an external file pulled in) is refused before anything in it is expanded or opened.

Encodings: expat reads UTF-8, UTF-16 and the single-byte encodings Python knows (ISO-8859-1, windows-1252 ...), but
no multi-byte one. GBK, GB2312 and GB18030, which Chinese labelling tools on Windows declare, are decoded here and
handed to expat as UTF-8; any other multi-byte encoding, or a name Python does not know, is one line naming the file."""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from xml.etree import ElementTree
from xml.parsers import expat

from detect.errors import UserError, short_repr

DECLARED_ENCODING = re.compile(rb"""^(?:\xef\xbb\xbf)?\s*<\?xml[^>]*?\sencoding\s*=\s*["']([^"']{1,40})["']""")
DECODED_HERE = ("gbk", "gb2312", "gb18030")  # Python's codec names (codecs.lookup: "GB2312", "cp936" ...)
READ = "UTF-8, UTF-16, single-byte encodings, GBK, GB2312 and GB18030"


class _Refused(Exception):
    """A DTD or entity declaration met by the parser."""


def _refuse(*_: object) -> None:
    raise _Refused


def _for_expat(data: bytes, path: Path) -> tuple[bytes, str | None]:
    """(the bytes expat is given, the encoding it is told to read them in: None, the file's own declaration)."""
    declared = DECLARED_ENCODING.match(data)
    if declared is None:
        return data, None
    name = declared.group(1).decode("ascii", "replace")
    try:
        codec = codecs.lookup(name).name
    except LookupError:
        raise UserError(f"{path}: declares encoding {short_repr(name)}, which Python does not know (this reads "
                        f"{READ}: save it as UTF-8)") from None
    if codec not in DECODED_HERE:
        return data, None
    try:
        return data.decode(codec).encode("utf-8"), "utf-8"
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not valid {name} (byte {data[error.start]:#04x} at offset {error.start}); save it "
                        "as UTF-8") from None


def read_xml(path: Path) -> ElementTree.Element:
    """The root element of `path`; a DTD, an entity declaration, an encoding it does not read or a syntax error is one
    UserError naming the file."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(f"{path}: cannot read ({error.strerror or error})") from None
    data, encoding = _for_expat(data, path)
    builder = ElementTree.TreeBuilder()
    parser = expat.ParserCreate(encoding)
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
    except (ValueError, LookupError):  # expat's "multi-byte encodings are not supported", and its unknown names
        declared = DECLARED_ENCODING.match(data)
        name = short_repr(declared.group(1).decode("ascii", "replace")) if declared else "an encoding"
        raise UserError(f"{path}: declares {name}, a multi-byte encoding this does not read (it reads {READ}): save "
                        "it as UTF-8") from None
    except (expat.ExpatError, AssertionError) as error:  # TreeBuilder.close asserts a root element was seen
        raise UserError(f"{path}: not well-formed XML ({error or 'no root element'})") from None
