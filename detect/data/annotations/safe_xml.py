"""XML read without a DTD: a file that declares one (and so could declare entities: the "billion laughs" expansion,
an external file pulled in) is refused before anything in it is expanded or opened.

Encodings: expat reads UTF-8 and UTF-16 itself and any other encoding one byte a character, so a multi-byte one
(Big5, Shift_JIS, GBK) is "multi-byte encodings are not supported" and one that changes meaning after an escape (HZ,
ISO-2022-JP) "not well-formed". So a file that starts with a byte-order mark is in the mark's encoding (UTF-8, UTF-16
or UTF-32), and one whose declaration names another is refused; any other encoding a file declares, if Python knows
it as a text encoding, is decoded here and handed to expat as UTF-8. What cannot be read is one line that says what
was seen (the declared encoding or none, the byte-order mark or none, the first byte that is not in the encoding
read) and what to do."""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from xml.etree import ElementTree
from xml.parsers import expat

from detect.errors import UserError, short_repr

DECLARED_ENCODING = re.compile(r"""^\ufeff?\s*<\?xml[^>]*?\sencoding\s*=\s*["']([^"']{1,40})["']""")
# (mark, its encoding as codecs names it, as messages name it): UTF-32's marks first, as UTF-16 LE's begins UTF-32 LE's
MARKS = ((codecs.BOM_UTF32_LE, "utf-32", "UTF-32"), (codecs.BOM_UTF32_BE, "utf-32", "UTF-32"),
         (codecs.BOM_UTF8, "utf-8-sig", "UTF-8"), (codecs.BOM_UTF16_LE, "utf-16", "UTF-16"),
         (codecs.BOM_UTF16_BE, "utf-16", "UTF-16"))
FAMILIES = {"utf-8": "UTF-8", "utf-8-sig": "UTF-8", "utf-16": "UTF-16", "utf-16-le": "UTF-16", "utf-16-be": "UTF-16",
            "utf-32": "UTF-32", "utf-32-le": "UTF-32", "utf-32-be": "UTF-32"}


class _Refused(Exception):
    """A DTD or entity declaration met by the parser."""


def _refuse(*_: object) -> None:
    raise _Refused


def _first_bad_byte(data: bytes, codec: str) -> str | None:
    """'byte 0x94 at offset 140' where `data` is not `codec`, else None."""
    try:
        data.decode(codec)
    except UnicodeDecodeError as error:
        return f"byte {data[error.start]:#04x} at offset {error.start}"
    return None


def _hint(data: bytes, read_as: str) -> str:
    """What to do with bytes that are not `read_as`: declare what they read as, else save them as UTF-8."""
    if read_as != "utf-8" and _first_bad_byte(data, "utf-8") is None:
        return 'its bytes are UTF-8: declare encoding="UTF-8" on its first line'
    if read_as != "gb18030" and _first_bad_byte(data, "gb18030") is None:
        return ('its bytes read as GB18030 (which holds GBK and GB2312): declare encoding="GB18030" on its first '
                "line, or save it as UTF-8")
    return "save it as UTF-8"


class _Seen:
    """What a file's first bytes say: its byte-order mark and its declared encoding (codecs' name and as written)."""

    def __init__(self, data: bytes, path: Path) -> None:
        self.mark = next(((codec, named) for mark, codec, named in MARKS if data.startswith(mark)), None)
        text = data[:1024].decode(self.mark[0] if self.mark else "latin-1", errors="ignore")
        declared = DECLARED_ENCODING.match(text)
        self.declared = declared.group(1) if declared else None
        self.codec = None
        if self.declared is not None:
            try:
                self.codec = codecs.lookup(self.declared).name
                b"<".decode(self.codec, "ignore")  # a codec that is no text encoding (base64, rot13): LookupError
            except LookupError:
                raise UserError(f"{path}: {self}, an encoding Python does not know as text: declare the encoding its "
                                "bytes are in (UTF-8, GB18030, Big5, Shift_JIS, windows-1252 ...), or save it as "
                                "UTF-8") from None

    def __str__(self) -> str:
        """'it declares 'GBK' and starts with a UTF-8 byte-order mark', 'it declares no encoding (XML then reads
        UTF-8) and has no byte-order mark'."""
        declared = f"declares {short_repr(self.declared)}" if self.declared else \
            "declares no encoding (XML then reads UTF-8)"
        return f"it {declared} and {f'starts with a {self.mark[1]}' if self.mark else 'has no'} byte-order mark"


def _decoded(data: bytes, codec: str, shown: str, seen: _Seen, path: Path) -> tuple[bytes, str]:
    """`data` read as `codec` (`shown` in messages), as UTF-8 for expat; one UserError where it is not."""
    bad = _first_bad_byte(data, codec)
    if bad is not None:
        raise UserError(f"{path}: {seen}, but {bad} is not {shown}: {_hint(data, codec)}")
    return data.decode(codec).encode("utf-8"), "utf-8"


def _for_expat(data: bytes, path: Path) -> tuple[bytes, str | None]:
    """(the bytes expat is given, the encoding it is told to read them in: None, the file's own declaration)."""
    seen = _Seen(data, path)
    if seen.mark is not None:
        codec, named = seen.mark
        if seen.codec is not None and FAMILIES.get(seen.codec) != named:
            valid = f", and its bytes are {named}" if _first_bad_byte(data, codec) is None else ""
            raise UserError(f"{path}: {seen}: they disagree (the mark is what a tool saving {named} writes{valid}); "
                            f'declare encoding="{named}" on its first line, or save it as {seen.declared} '
                            "without the mark")
        return _decoded(data, codec, named, seen, path)
    if seen.codec in ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"):
        raise UserError(f"{path}: {seen}, but its first line is one byte a character, which {seen.declared} never "
                        f"is: the declaration is wrong; {_hint(data, seen.codec)}")
    if seen.codec not in (None, "utf-8"):
        return _decoded(data, seen.codec, seen.declared, seen, path)
    return data, None


def _not_well_formed(data: bytes, path: Path, error: Exception) -> UserError:
    """The line for expat's error: the encoding read and its first bad byte where the bytes are not in it."""
    seen = _Seen(data, path)
    bad = None if seen.mark or seen.codec not in (None, "utf-8") else _first_bad_byte(data, "utf-8")  # else decoded
    if bad is not None:
        return UserError(f"{path}: {seen}, but {bad} is not {seen.declared or 'UTF-8'}: {_hint(data, 'utf-8')}")
    return UserError(f"{path}: not well-formed XML ({error or 'no root element'}; {seen})")


def read_xml(path: Path) -> ElementTree.Element:
    """The root element of `path`; a DTD, an entity declaration, an encoding it does not read or a syntax error is one
    UserError naming the file."""
    try:
        original = path.read_bytes()
    except OSError as error:
        raise UserError(f"{path}: cannot read ({error.strerror or error})") from None
    data, encoding = _for_expat(original, path)
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
    except (expat.ExpatError, AssertionError) as error:  # TreeBuilder.close asserts a root element was seen
        raise _not_well_formed(original, path, error) from None
