"""VOC and CVAT xml as labelling tools on Windows save them (GBK, GB2312, GB18030, HZ, Big5, Shift_JIS, EUC-KR,
ISO-2022-JP declared: any text encoding Python knows), or with a byte-order mark, read by `python -m detect.data` as a
user runs it: the same boxes and class names as in UTF-8; a name Python does not know as a text encoding, bytes that
are not the declared encoding, or a declaration the byte-order mark contradicts: one line naming the file and saying
what was seen and what to do, exit 2."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest
import yaml

from detect.data import load_data_config, load_split
from tests.data.annotations.helpers import rows_of, write_images
from tests.user_run import run_cli

NAMES = ["行人", "车辆"]  # pedestrian, vehicle
VOC = """<?xml version="1.0" encoding="{encoding}"?>
<annotation><folder>图片</folder><filename>街道.jpg</filename><size><width>200</width><height>100</height><depth>3</depth>
</size><object><name>行人</name><difficult>0</difficult><bndbox><xmin>21</xmin><ymin>11</ymin><xmax>60</xmax><ymax>30</ymax>
</bndbox></object><object><name>车辆</name><difficult>0</difficult><bndbox><xmin>101</xmin><ymin>51</ymin><xmax>200</xmax>
<ymax>100</ymax></bndbox></object></annotation>
"""
CVAT = """<?xml version="1.0" encoding="{encoding}"?>
<annotations><version>1.1</version><meta><task><labels><label><name>行人</name></label><label><name>车辆</name></label>
</labels></task></meta><image id="0" name="街道.jpg" width="200" height="100"><box label="行人" xtl="20" ytl="10" xbr="60"
ybr="30"/><box label="车辆" xtl="100" ytl="50" xbr="200" ybr="100"/></image></annotations>
"""
EXPECTED = {"街道.jpg": [[0, 0.2, 0.2, 0.2, 0.2, 0], [1, 0.75, 0.75, 0.5, 0.5, 0]]}


def _dataset(root: Path, form: str, encoding: str | None, codec: str | None = None, mark: bytes = b"") -> Path:
    """root/data.yaml reading one VOC file or one CVAT xml declaring `encoding` (None: no declaration), its bytes
    written in `codec` after `mark`."""
    write_images(root / "images", {"街道.jpg": (200, 100)})
    text = (VOC if form == "voc" else CVAT).format(encoding=encoding)
    if encoding is None:
        text = text.split("\n", 1)[1]
    text = mark + text.encode(codec or encoding)
    if form == "voc":
        (root / "Annotations").mkdir(parents=True)
        (root / "Annotations" / "街道.xml").write_bytes(text)
        annotations = "Annotations"
    else:
        (root / "annotations.xml").write_bytes(text)
        annotations = "annotations.xml"
    split = {"annotations": annotations, "images": "images"}
    source = root / "data.yaml"
    source.write_text(yaml.safe_dump({"path": str(root), "train": split, "val": split, "names": NAMES},
                                     allow_unicode=True), encoding="utf-8")
    return source


@pytest.mark.parametrize("encoding", ["GBK", "GB2312", "gb18030", "cp936", "UTF-8"])
@pytest.mark.parametrize("form", ["voc", "cvat"])
def test_gbk_gb2312_gb18030_read_as_utf_8(tmp_path: Path, form: str, encoding: str) -> None:
    source = _dataset(tmp_path, form, encoding)
    done = run_cli("detect.data", "--data", str(source), timeout=120, memory_gb=4, merge_output=True)
    assert done.returncode == 0 and "Traceback" not in done.stdout and "unknown class" not in done.stdout, done.stdout
    assert rows_of(load_split(load_data_config(source), "val")) == EXPECTED


@pytest.mark.parametrize(("encoding", "codec", "line"), [
    ("x-chinese-9", "utf-8", ("it declares 'x-chinese-9' and has no byte-order mark, an encoding Python does not "
                             "know as text: declare the encoding its bytes are in (UTF-8, GB18030, Big5, Shift_JIS, "
                             "windows-1252 ...), or save it as UTF-8")),
    ("base64", "utf-8", "it declares 'base64' and has no byte-order mark, an encoding Python does not know as text"),
    ("Big5", "utf-8", ("it declares 'Big5' and has no byte-order mark, but byte 0x"  # UTF-8 bytes Big5 lacks
                       )),
    ("GB2312", "gb18030", "it declares 'GB2312' and has no byte-order mark, but byte 0x"),  # a GB18030 four-byte character GB2312 lacks
])
@pytest.mark.parametrize("form", ["voc", "cvat"])
def test_another_encoding_is_one_line_naming_the_file(tmp_path: Path, form: str, encoding: str, codec: str,
                                                       line: str) -> None:
    source = _dataset(tmp_path, form, encoding, codec)
    if codec == "gb18030":  # U+1F600 in GB18030: four bytes, no GB2312 character
        target = next(path for path in tmp_path.rglob("*.xml"))
        target.write_bytes(target.read_bytes().replace("车辆".encode("gb18030"), "\U0001f600".encode("gb18030")))
    done = run_cli("detect.data", "--data", str(source), timeout=120, memory_gb=4)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    errors = [text for text in done.stderr.splitlines() if text.startswith("error")]
    assert len(errors) == 1 and ".xml: " in errors[0] and line in errors[0], done.stderr


@pytest.mark.parametrize(("encoding", "codec", "mark"), [
    ("utf-8-sig", "utf-8", b""), ("utf-8-sig", "utf-8", codecs.BOM_UTF8), ("HZ-GB-2312", "hz", b""),
    ("UTF-16", "utf-16", b""), (None, "utf-32", b""), (None, "utf-8", codecs.BOM_UTF8), ("UTF-8", "utf-8", b"")])
def test_a_byte_order_mark_and_the_encodings_python_decodes_are_read(tmp_path: Path, encoding, codec, mark) -> None:
    source = _dataset(tmp_path, "voc", encoding, codec, mark)  # utf-16 and utf-32 write their own mark
    if encoding in ("utf-8-sig", "HZ-GB-2312") and not mark:  # the two: as a user runs them too
        done = run_cli("detect.data", "--data", str(source), timeout=120, memory_gb=4, merge_output=True)
        assert done.returncode == 0 and "Traceback" not in done.stdout and "unknown class" not in done.stdout, \
            done.stdout
    assert rows_of(load_split(load_data_config(source), "val")) == EXPECTED


@pytest.mark.parametrize(("encoding", "codec", "mark", "line"), [
    # the case: it was "not valid GBK (byte 0xbf at offset 2); save it as UTF-8"
    ("GBK", "utf-8", codecs.BOM_UTF8, ("it declares 'GBK' and starts with a UTF-8 byte-order mark: they disagree (the "
     'mark is what a tool saving UTF-8 writes, and its bytes are UTF-8); declare encoding="UTF-8" on its first line, '
     "or save it as GBK without the mark")),
    # it was read, its names garbled ('è¡\x8c' for '行人'): every box an unknown class
    ("ISO-8859-1", "utf-8", codecs.BOM_UTF8, ("it declares 'ISO-8859-1' and starts with a UTF-8 byte-order mark: they "
     "disagree")),
    ("GBK", "utf-16", b"", "it declares 'GBK' and starts with a UTF-16 byte-order mark: they disagree"),
    # these were "not well-formed XML (not well-formed (invalid token): line 2, column 22)"
    (None, "gbk", b"", ("it declares no encoding (XML then reads UTF-8) and has no byte-order mark, but byte 0xbd at "
     'offset 43 is not UTF-8: its bytes read as GB18030 (which holds GBK and GB2312): declare encoding="GB18030" '
     "on its first line, or save it as UTF-8")),
    ("UTF-8", "gbk", b"", "it declares 'UTF-8' and has no byte-order mark, but byte 0xbd at offset 82"),
    ("UTF-16", "utf-8", b"", ("it declares 'UTF-16' and has no byte-order mark, but its first line is one byte a "
     "character, which UTF-16 never is: the declaration is wrong; its bytes are UTF-8")),
])
def test_an_encoding_that_cannot_be_read_says_what_was_seen_and_what_to_do(tmp_path: Path, encoding, codec, mark,
                                                                           line) -> None:
    source = _dataset(tmp_path, "voc", encoding, codec, mark)
    done = run_cli("detect.data", "--data", str(source), timeout=120, memory_gb=4)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    errors = [text for text in done.stderr.splitlines() if text.startswith("error")]
    assert len(errors) == 1 and "街道.xml: " in errors[0] and line in errors[0], done.stderr


@pytest.mark.parametrize("encoding", ["Big5", "Shift_JIS", "EUC-KR", "ISO-2022-JP", "cp950"])
def test_any_multi_byte_encoding_python_knows_is_read(tmp_path: Path, encoding: str) -> None:
    # expat reads none of these ("multi-byte encodings are not supported"; ISO-2022-JP "not well-formed");
    # the names are characters all five hold (行人 pedestrian, 人 person; 街道 street)
    voc = VOC.replace("图片", "街道").replace("车辆", "人")
    write_images(tmp_path / "images", {"街道.jpg": (200, 100)})
    (tmp_path / "Annotations").mkdir()
    (tmp_path / "Annotations" / "街道.xml").write_bytes(voc.format(encoding=encoding).encode(encoding))
    split = {"annotations": "Annotations", "images": "images"}
    source = tmp_path / "data.yaml"
    source.write_text(yaml.safe_dump({"path": str(tmp_path), "train": split, "val": split, "names": ["行人", "人"]},
                                     allow_unicode=True), encoding="utf-8")
    done = run_cli("detect.data", "--data", str(source), timeout=120, memory_gb=4, merge_output=True)
    assert done.returncode == 0 and "Traceback" not in done.stdout and "unknown class" not in done.stdout, done.stdout
    assert rows_of(load_split(load_data_config(source), "val")) == EXPECTED
