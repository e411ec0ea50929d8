"""A CVAT for images 1.1 xml: float pixel boxes, occluded boxes kept, other shapes counted, labels' order."""

from __future__ import annotations

from pathlib import Path

import pytest

from detect.errors import UserError
from tests.data.annotations.helpers import load, rows_of, write_images

CVAT = """<?xml version="1.0" encoding="utf-8"?>
<annotations>
  <version>1.1</version>
  <meta><task><labels><label><name>b</name></label><label><name>a</name></label></labels></task></meta>
  <image id="0" name="folder/one.png" width="200" height="100">
    <box label="a" occluded="1" source="manual" xtl="20.5" ytl="10" xbr="60.5" ybr="30" z_order="0">
      <attribute name="colour">red</attribute>
    </box>
    <box label="b" occluded="0" xtl="80" ytl="40" xbr="120" ybr="60" rotation="90"></box>
    <polygon label="a" occluded="0" points="1,1;5,5;1,5"></polygon>
  </image>
  <image id="1" name="two.png" width="50" height="50"></image>
</annotations>
"""


@pytest.fixture
def cvat(tmp_path: Path) -> Path:
    write_images(tmp_path / "images", {"one.png": (200, 100), "two.png": (50, 50)})
    (tmp_path / "annotations.xml").write_text(CVAT)
    return tmp_path


def test_boxes_occluded_kept_rotation_and_other_shapes_counted(cvat: Path) -> None:
    split = load(cvat, "annotations.xml")
    # the rotated box, 40 x 20 about its centre (100, 50), is enclosed by a box 20 x 40
    assert rows_of(split) == {"one.png": [[0, 0.2025, 0.2, 0.2, 0.2, 0], [1, 0.5, 0.5, 0.1, 0.4, 0]], "two.png": []}
    assert split.counts["label file: CVAT polygon left out"] == 1
    assert split.counts["label file: rotated box: its enclosing box read"] == 1
    assert split.counts["background"] == 1


def test_names_in_the_order_of_the_files_labels(cvat: Path) -> None:
    split = load(cvat, "annotations.xml", names=None)
    assert split.names == ["b", "a"] and [row[0] for row in rows_of(split)["one.png"]] == [1, 0]


def test_video_files_and_other_xml_are_refused_in_one_line(cvat: Path) -> None:
    (cvat / "annotations.xml").write_text("<annotations><version>1.1</version><track id='0' label='a'></track>"
                                          "</annotations>")
    with pytest.raises(UserError, match=r"a CVAT for video file \(<track> elements\): export the task as CVAT for"):
        load(cvat, "annotations.xml")
    (cvat / "annotations.xml").write_text("<annotation><filename>x.png</filename></annotation>")
    with pytest.raises(UserError, match=r"not a CVAT for images 1.1 file \(the root element is <annotation>"):
        load(cvat, "annotations.xml")
    (cvat / "annotations.xml").write_text('<annotations><image name="one.png" width="200"></image></annotations>')
    with pytest.raises(UserError, match=r"annotations\.xml: not a CVAT for images 1.1 file \(KeyError: 'height'\)"):
        load(cvat, "annotations.xml")
