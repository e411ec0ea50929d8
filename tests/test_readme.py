"""The README stays a front door that cannot drift: every `python -m detect.<cli>` line in its bash blocks parses with
that CLI's own parser, it stays short, its links (and those between the docs/ pages) reach a file and a heading, and
docs/architecture.md's floors table says what tests/test_layering.py enforces."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

from detect.errors import UserError
from tests.test_layering import FLOORS

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 250  # the front door: the commands of each job, the details in docs/
# The README's bash blocks hold 31 detect command lines today; a parser that found none must not pass.
MIN_CHECKED = 28
BASH_BLOCK = re.compile(r"^ *```bash\n(.*?)^ *```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def command_lines(markdown: str) -> list[str]:
    """The shell lines of `markdown`'s bash blocks, `\\` continuations joined."""
    lines = []
    for block in BASH_BLOCK.findall(markdown):
        lines += block.replace("\\\n", " ").splitlines()
    return [line.strip() for line in lines if line.strip()]


def detect_command(words: list[str]) -> tuple[str, list[str]] | None:
    """(module, arguments) of a `python -m detect.X ...` or `torchrun ... -m detect.X ...` command, else None."""
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # leading VAR=value assignments
        words = words[1:]
    if not words or words[0] not in ("python", "torchrun") or "-m" not in words:
        return None
    at = words.index("-m")
    if words[0] == "python" and at != 1 or at + 1 == len(words) or not words[at + 1].startswith("detect."):
        return None
    return words[at + 1], words[at + 2:]


def readme_commands() -> tuple[list[tuple[str, str, list[str]]], list[str]]:
    """The README's detect commands as (line, module, arguments), and the other commands (pip, scripts, pytest)."""
    checked, skipped = [], []
    for line in command_lines(README.read_text()):
        words = shlex.split(line, comments=True)
        commands = [[]]
        for word in words:  # `a && b`: each side is a command
            commands.append([]) if word == "&&" else commands[-1].append(word)
        for words in filter(None, commands):
            found = detect_command(words)
            if found:
                checked.append((line, *found))
            else:
                skipped.append(shlex.join(words))
    return checked, skipped


def parser_of(module: str):
    """The `parse_args` of the CLI `python -m module` runs (a package's `__main__`)."""
    imported = importlib.import_module(module)
    if hasattr(imported, "__path__"):
        imported = importlib.import_module(f"{module}.__main__")
    return imported.parse_args


CHECKED, SKIPPED = readme_commands()


@pytest.mark.parametrize("line, module, arguments", CHECKED, ids=[line for line, _, _ in CHECKED])
def test_readme_command_parses(line, module, arguments):
    try:
        parser_of(module)(arguments)
    except (SystemExit, UserError) as error:
        pytest.fail(f"README.md: `{line}` does not parse with {module}'s parser: {error}")


def test_readme_commands_are_found():
    # pip and scripts/ lines are skipped (nothing to parse them with), but the detect ones must be there
    assert len(CHECKED) >= MIN_CHECKED, (len(CHECKED), SKIPPED)
    assert {module for _, module, _ in CHECKED} >= {"detect.train", "detect.val", "detect.predict", "detect.export",
                                                    "detect.models", "detect.data"}
    assert any(line.startswith("torchrun") for line, _, _ in CHECKED)
    assert "pip install -e '.[dev]'" in SKIPPED


def test_a_misspelled_flag_fails():
    # The check itself must be able to fail.
    module, arguments = detect_command(shlex.split("python -m detect.val --weights a.pt --imgszz 640"))
    with pytest.raises(SystemExit):
        parser_of(module)(arguments)


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= MAX_README_LINES


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings (lower case, punctuation dropped, spaces to hyphens)."""
    text = re.sub(r"^ *```.*?^ *```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    headings = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda page: page.name)
def test_links_reach_a_file_and_heading(page):
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        assert path.is_file(), f"{page.name} links to {target}: no such file"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{page.name} links to {target}: no such heading"


# A module or script a page names: `detect/data/loader.py`, `scripts/x.sh`, or by its path inside detect/
# (`data/labels/checked.py`, `labels/checked.py`); yolov5.md names yolov5's own (`models/common.py`), torch-npu.md
# torch_npu's (`torch_npu/npu/random.py`), which are not checked.
NAMED_MODULE = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.(?:py|sh))\b")
OURS = ("detect/", "scripts/", "tests/", *sorted({f"{path.name}/" for path in (REPO / "detect").rglob("*")
                                                  if path.is_dir() and path.name != "__pycache__"}))


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda page: page.name)
def test_every_module_a_page_names_exists(page):
    """A module a page names by path is there: a file moved or merged leaves no stale name behind."""
    files = [path.relative_to(REPO).as_posix() for folder in ("detect", "scripts", "tests")
             for path in (REPO / folder).rglob("*") if path.suffix in (".py", ".sh")]
    named = set(NAMED_MODULE.findall(page.read_text()))
    if page.name == "yolov5.md":  # yolov5's files, by their paths in its repository
        named = {name for name in named if name.startswith(("detect/", "scripts/", "tests/"))}
    stale = sorted(name for name in named if name.startswith(OURS) and not any(
        file == name or file.endswith(f"/{name}") for file in files))
    assert not stale, f"{page.name} names modules that do not exist: {stale}"


def test_readme_links_the_docs():
    linked = {target.partition("#")[0] for target in LINK.findall(README.read_text())}
    assert {f"docs/{page.name}" for page in DOCS.glob("*.md")} <= linked


def test_architecture_floors_are_the_layering_tests():
    rows = re.findall(r"^\| (\d) \| (.+?) \|", (DOCS / "architecture.md").read_text(), re.MULTILINE)
    documented = {name: int(floor) for floor, names in rows for name in re.findall(r"`(\w+)`", names)}
    assert documented == FLOORS


# Documents outside the repo that code and docs once cited; a reader with only the repo cannot follow them.
OUTSIDE_DOCS = re.compile(r"DESIGN\.md|STYLE\.md|YOLOV5-FACTS|ROADMAP\.md|ENV-NOTES|(?<![\w-])NPU\.md|\.\./shared\b")
# `docs/x.md, "Heading"`, `docs/x.md ("Heading", "Other")` or `docs/x.md "Heading"`: a page and the headings cited.
CITATION = re.compile(r'docs/([\w-]+\.md)(?:,? \(?((?:"[^"]+")(?:, "[^"]+")*))?')


def citing_files() -> list[Path]:
    """The repo's own text that may cite docs: the package, scripts, tests (but this file, whose examples are not
    citations), hubconf.py, the README and docs/."""
    roots = [REPO / "detect", REPO / "scripts", REPO / "tests"]
    files = [path for root in roots for path in root.rglob("*") if path.is_file() and path != Path(__file__).resolve()
             and path.suffix in (".py", ".yaml", ".sh", ".md", ".txt", ".html", ".toml")]
    return [*files, REPO / "hubconf.py", README, *DOCS.glob("*.md")]


def headings(page: Path) -> set[str]:
    """The headings of a markdown page as written, outside code blocks."""
    text = re.sub(r"^ *```.*?^ *```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return {heading.strip() for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def citations(text: str) -> list[tuple[str, list[str]]]:
    """(page, headings) of each docs/ citation in `text`; a heading broken over comment lines is joined."""
    found = []
    for page, quoted in CITATION.findall(text):
        names = [" ".join(re.sub(r"\s*#\s*", " ", name).split()) for name in re.findall(r'"([^"]+)"', quoted)]
        found.append((page, names))
    return found


def test_nothing_cites_a_document_outside_the_repo():
    offenders = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
                 for path in citing_files()
                 for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
                 if OUTSIDE_DOCS.search(line)]
    assert not offenders, "cite docs/ in the repo instead:\n" + "\n".join(offenders)


def test_cited_docs_and_headings_exist():
    cited = [(path, page, names) for path in citing_files() for page, names in citations(path.read_text())]
    assert len(cited) > 50  # the pattern finds the citations there are
    missing = [f"{path.relative_to(REPO)}: docs/{page} {names}" for path, page, names in cited
               if not (DOCS / page).is_file() or not set(names) <= headings(DOCS / page)]
    assert not missing, "no such page or heading:\n" + "\n".join(missing)


def test_the_citation_checks_can_fail():
    assert OUTSIDE_DOCS.search("see YOLOV5-FACTS.md") and OUTSIDE_DOCS.search("path: ../shared/data")
    assert OUTSIDE_DOCS.search("(NPU.md §5)") and not OUTSIDE_DOCS.search("docs/torch-npu.md")
    assert citations('(docs/yolov5.md, "Loss")  # (docs/yolov5.md, "Step order and\n    # gradient clip")') == [
        ("yolov5.md", ["Loss"]), ("yolov5.md", ["Step order and gradient clip"])]
    assert "Nonexistent" not in headings(DOCS / "yolov5.md") and "Loss" in headings(DOCS / "yolov5.md")
