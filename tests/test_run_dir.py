"""Run folders and the names made in them: a class name becomes one safe, readable, unique file name; --name stays
inside --project; nothing is made for a refused name."""

from __future__ import annotations

import pytest

from detect.errors import UserError
from detect.run_dir import MAX_NAME_BYTES, check_folder, check_run_name, make_run_dir, safe_name, safe_names


@pytest.mark.parametrize(("text", "safe"), [
    ("person", "person"),
    ("traffic light", "traffic light"),
    ("../../../x", ".._.._.._x"),
    ("/abs/path", "_abs_path"),
    ("..\\..\\x", ".._.._x"),
    ("a\nb", "a_b"),
    ("nul\x00byte", "nul_byte"),
    ("C:stream", "C_stream"),  # ':' opens an NTFS stream
    ("..", "_.."),
    (".", "_."),
    ("CON", "_CON"),
    ("con.jpg", "_con.jpg"),
    ("Com1", "_Com1"),
    ("console", "console"),
    ("", "_"),
    ("   ", "_"),
])
def test_safe_name_is_one_readable_component(text, safe):
    assert safe_name(text) == safe


def test_safe_name_is_bounded_in_bytes_and_keeps_whole_characters():
    assert safe_name("x" * 300) == "x" * MAX_NAME_BYTES
    long = safe_name("é" * 300)  # two bytes each: cut between characters, not inside one
    assert long == "é" * (MAX_NAME_BYTES // 2) and len(long.encode()) <= MAX_NAME_BYTES


def test_safe_names_are_unique_per_class_even_ignoring_case():
    names = safe_names(["a/b", "a_b", "", "class2", "Cat", "cat", "a\nb", "cat"])
    assert names == ("a_b_0", "a_b", "class2_2", "class2", "Cat", "cat_5", "a_b_6", "cat_7")
    assert len({name.casefold() for name in names}) == len(names)


def test_a_suffix_that_is_taken_moves_on():
    assert safe_names(["a/b", "a_b", "a_b_0"]) == ("a_b_0_1", "a_b", "a_b_0")


@pytest.mark.parametrize("name", ["exp", "exp/a", "exp/a/b", "./exp", "exp/", "my run", "v1:test", "x..y"])
def test_a_name_inside_the_project_is_allowed(name, tmp_path):
    check_run_name(name)
    made = make_run_dir(tmp_path / "runs", name)
    assert made.is_dir() and made.resolve().is_relative_to(tmp_path / "runs") and made.resolve() != tmp_path / "runs"


@pytest.mark.parametrize("name", ["../x", "../../x", "exp/../../x", "..", "/abs/path", "\\abs", "..\\x", "a\nb",
                                  "a\tb", "a\x00b", "", ".", "./"])
def test_a_name_that_leaves_the_project_or_holds_a_control_character_is_refused(name, tmp_path):
    with pytest.raises(UserError, match=r"^--name .*: must be a folder inside --project: no '\.\.' component, not "
                                        "absolute, no control character$"):
        make_run_dir(tmp_path / "runs", name)
    assert list(tmp_path.iterdir()) == []  # not even the project


def test_project_may_be_anywhere_but_holds_no_control_character(tmp_path):
    assert make_run_dir(tmp_path / ".." / tmp_path.name / "runs", "exp").is_dir()
    check_folder(tmp_path.resolve(), "--output-dir")
    with pytest.raises(UserError, match=r"^--project '.*runs\\nx': a folder name with a control character"):
        make_run_dir(tmp_path / "runs\nx", "exp")
    with pytest.raises(UserError, match=r"^--output-dir 'out\\rx': a folder name with a control character"):
        check_folder("out\rx", "--output-dir")
