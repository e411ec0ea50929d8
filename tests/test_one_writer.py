"""Every file the package writes goes through the one writer, detect/atomic_file/ (docs/architecture.md, "One
writer"): a call that writes, moves or removes a file or folder appears only there, inside a `with replacing(...)`
block, or given a `temporary` the writer made; the few exceptions are listed below, each with why.

Found with ast: calls by the names of Python's, numpy's, OpenCV's, matplotlib's, torch's, ONNX's and OpenVINO's writes,
and open() with a mode that writes. A library that writes by a name not listed here is not found: the list grows with
the code's imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "detect"
WRITER = PACKAGE / "atomic_file"
# Methods and functions that write, move or remove, whatever they are called on.
WRITING_NAMES = {"write_text", "write_bytes", "mkdir", "makedirs", "symlink_to", "hardlink_to", "unlink", "rmdir",
                 "removedirs", "touch", "rename", "renames", "replace", "remove", "link", "symlink", "truncate",
                 "copy", "copy2", "copyfile", "copytree", "move", "rmtree", "savefig", "imwrite", "VideoWriter",
                 "save", "savez", "savez_compressed", "savetxt", "tofile", "save_model", "quantize_static", "export",
                 "SummaryWriter", "tensorboard_trace_handler"}
# Those of them that the code may call by a bare name (imported with `from ... import`): a bare `touch` or `save` is
# a function of ours.
BARE = {"SummaryWriter", "VideoWriter", "tensorboard_trace_handler", "rmtree", "copy2", "copyfile", "copytree",
        "makedirs", "imwrite", "savetxt", "savez", "save_model", "quantize_static"}
# Receivers whose `replace`, `save`, `export`, `link`, ... are writes (str.replace and a results object's save are not).
AMBIGUOUS = {"replace": {"os"}, "remove": {"os"}, "link": {"os"}, "symlink": {"os"}, "truncate": {"os"},
             "copy": {"shutil"}, "move": {"shutil"}, "save": {"torch", "jit", "onnx", "np", "numpy"},
             "export": {"onnx"}, "rename": {"os"}}
# (file, call) -> why it writes without the writer.
ALLOWED = {
    ("backend/cpu.py", "write_text"): "/proc/self/clear_refs: a kernel control file, no file on a disk",
    ("data/images/ram_cache.py", "open"): "maps --cache ram's buffer in /dev/shm (made whole by the writer) to fill it",
    ("data/storage/object_cache.py", "open"): "a lock file, opened to hold a flock and never written",
    ("training/results_log.py", "SummaryWriter"): "TensorBoard writes its event files into the run folder the writer made",
    ("backend/base.py", "tensorboard_trace_handler"): "the profiler's traces, in the folder the Profiler hook made "
                                                     "through the writer (training/hooks.py)",
    ("backend/npu.py", "tensorboard_trace_handler"): "as backend/base.py's",
    ("exporters/amct.py", "save_model"): "AMCT's scratch files, in a tempfile.TemporaryDirectory of its own",
}


def _name(function: ast.expr) -> tuple[str, str]:
    """(the called name, the name it is called on: '' for a bare function)."""
    if isinstance(function, ast.Attribute):
        value = function.value
        owner = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else "?"
        return function.attr, owner
    return (function.id, "") if isinstance(function, ast.Name) else ("", "")


def _opens_for_writing(call: ast.Call) -> bool:
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    if isinstance(call.func, ast.Attribute) and call.func.attr == "open" and call.args:  # Path.open(mode)
        mode = call.args[0]
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and bool(set(mode.value) & set("wax+"))


def _writes(call: ast.Call) -> str | None:
    """The name of the write `call` makes, else None."""
    name, owner = _name(call.func)
    if name == "open" and owner in ("", "os", "io") or name == "open" and _opens_for_writing(call):
        return "open" if owner == "os" or _opens_for_writing(call) else None
    if name not in WRITING_NAMES or owner == "atomic_file" or not owner and name not in BARE:
        return None
    return name if name not in AMBIGUOUS or owner in AMBIGUOUS[name] else None


def _names_a_temporary(call: ast.Call) -> bool:
    """Whether the call is given a path the writer made: a name or attribute `temporary`."""
    return any(isinstance(node, ast.Name) and node.id == "temporary" or
               isinstance(node, ast.Attribute) and node.attr == "temporary" for node in ast.walk(call))


def raw_writes(source: str) -> list[tuple[int, str]]:
    """(line, call) of each write in `source` outside a `with replacing(...)` block that names no temporary."""
    found = []

    def visit(node: ast.AST, in_replacing: bool) -> None:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            in_replacing = in_replacing or any(
                isinstance(item.context_expr, ast.Call) and _name(item.context_expr.func)[0] == "replacing"
                for item in node.items)
        if isinstance(node, ast.Call) and not in_replacing and not _names_a_temporary(node):
            written = _writes(node)
            if written:
                found.append((node.lineno, written))
        for child in ast.iter_child_nodes(node):
            visit(child, in_replacing)

    visit(ast.parse(source), False)
    return found


def test_every_write_goes_through_the_writer():
    found = [f"{path.relative_to(PACKAGE)}:{line}: {call}" for path in sorted(PACKAGE.rglob("*.py"))
             if WRITER not in path.parents
             for line, call in raw_writes(path.read_text(encoding="utf-8"))
             if (path.relative_to(PACKAGE).as_posix(), call) not in ALLOWED]
    assert not found, "write through detect.atomic_file (or say why not in ALLOWED):\n" + "\n".join(found)


def test_every_exception_is_still_needed():
    used = {(path.relative_to(PACKAGE).as_posix(), call) for path in sorted(PACKAGE.rglob("*.py"))
            for _, call in raw_writes(path.read_text(encoding="utf-8"))}
    assert set(ALLOWED) <= used, sorted(set(ALLOWED) - used)


@pytest.mark.parametrize("code", [
    "path.write_text('x')\n", "open(path, 'w')\n", "open(path, mode='ab')\n", "Path(p).open('wb')\n",
    "os.replace(a, b)\n", "shutil.copy2(a, b)\n", "shutil.rmtree(p)\n", "cv2.imwrite(str(p), image)\n",
    "figure.savefig(p)\n", "torch.save(payload, p)\n", "torch.jit.save(m, p)\n", "onnx.save(m, p)\n",
    "np.savetxt(p, rows)\n", "p.mkdir(parents=True)\n", "os.makedirs(p)\n", "p.unlink()\n", "os.open(p, flags)\n",
    "torch.onnx.export(m, x, p)\n", "with open(p, 'wb') as handle:\n    np.save(handle, a)\n",
])
def test_the_check_finds_a_raw_write(code):
    assert raw_writes(code)


@pytest.mark.parametrize("code", [
    "with replacing(p) as temporary, open(temporary, 'wb') as handle:\n    np.save(handle, a)\n",
    "cv2.VideoWriter(str(draft.temporary), fourcc, 30.0, size)\n", "onnx.save(model, str(temporary))\n",
    "open(p)\n", "open(p, 'rb')\n", "text.replace('a', 'b')\n", "results.save()\n", "write_text(p, 'x')\n",
    "atomic_file.copy_file(a, b)\n", "touch(p)\n",
])
def test_the_check_passes_the_writers_own_ways(code):
    assert raw_writes(code) == []
