"""VOC and CVAT xml as Chinese labelling tools on Windows save them (GBK, GB2312, GB18030 declared), read by
`python -m detect.data` as a user runs it: the same boxes and class names as in UTF-8; any other multi-byte encoding,
a name Python does not know, or bytes that are not the declared encoding: one line naming the file, exit 2."""

from __future__ import annotations

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


def _dataset(root: Path, form: str, encoding: str, codec: str | None = None) -> Path:
    """root/data.yaml reading one VOC file or one CVAT xml in `encoding`, its bytes written in `codec`."""
    write_images(root / "images", {"街道.jpg": (200, 100)})
    text = (VOC if form == "voc" else CVAT).format(encoding=encoding).encode(codec or encoding)
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
    ("Big5", "utf-8", ("declares 'Big5', a multi-byte encoding this does not read (it reads UTF-8, UTF-16, single-byte "
                      "encodings, GBK, GB2312 and GB18030): save it as UTF-8")),
    ("x-chinese-9", "utf-8", ("declares encoding 'x-chinese-9', which Python does not know (this reads UTF-8, UTF-16, "
                             "single-byte encodings, GBK, GB2312 and GB18030: save it as UTF-8)")),
    ("GB2312", "gb18030", "not valid GB2312 (byte 0x"),  # a GB18030 four-byte character GB2312 lacks
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
