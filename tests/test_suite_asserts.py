"""Every test can fail: its body asserts, expects an exception or a failed process, or calls a helper of the suite
that does (found by reading the tests' source, transitively)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Calls that fail a test by themselves: pytest's expectations, and running a process that must succeed.
FAILING_CALLS = {"raises", "warns", "fail", "deprecated_call", "check_call", "check_output", "assert_allclose",
                 "assert_array_equal", "assert_equal", "assert_close"}


def _called_names(node: ast.AST) -> set[str]:
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            function = call.func
            names.add(function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", ""))
    return names


def _fails_by_itself(node: ast.AST) -> bool:
    """An assert, a failing call, or `subprocess.run(..., check=True)`."""
    for child in ast.walk(node):
        if isinstance(child, ast.Assert):
            return True
        if isinstance(child, ast.Call) and any(keyword.arg == "check" and getattr(keyword.value, "value", None) is True
                                               for keyword in child.keywords):
            return True
    return bool(_called_names(node) & FAILING_CALLS)


def _functions() -> dict[str, list[ast.FunctionDef]]:
    functions: dict[str, list[ast.FunctionDef]] = {}
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                node.path = path  # type: ignore[attr-defined]
                functions.setdefault(node.name, []).append(node)
    return functions


def assertionless_tests() -> list[str]:
    """'path:line name' of each test function that neither asserts nor calls anything that does."""
    functions = _functions()
    asserting = {name for name, nodes in functions.items() if any(_fails_by_itself(node) for node in nodes)}
    grown = True
    while grown:  # helpers that call asserting helpers assert too
        more = {name for name, nodes in functions.items()
                if name not in asserting and any(_called_names(node) & asserting for node in nodes)}
        asserting |= more
        grown = bool(more)
    return [f"{node.path.relative_to(TESTS)}:{node.lineno} {name}"
            for name, nodes in functions.items() if name.startswith("test_") and name not in asserting
            for node in nodes]


def test_every_test_asserts_something():
    assert assertionless_tests() == []


def test_a_test_without_an_assertion_is_found(tmp_path, monkeypatch):
    (tmp_path / "test_weak.py").write_text("def helper(x):\n    assert x\n\n\ndef test_strong():\n    helper(1)\n\n\n"
                                            "def test_weak():\n    print('nothing checked')\n")
    monkeypatch.setitem(globals(), "TESTS", tmp_path)
    assert assertionless_tests() == ["test_weak.py:9 test_weak"]
