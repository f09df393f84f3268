"""The repository explains itself: every reference in it resolves inside it.

- Every requirement id cited in a source, test, doc or page file is a line of the index of
  docs/requirements.md, and every id built there is cited somewhere else.
- No file cites a document that lives outside the repository: the product contract, the
  architecture or style notes, or the old system's documents (nor quotes those in Chinese).
- Every incident name used anywhere is a row of docs/incidents.md, and every row is used.
- Every test file (and test function) named in docs/requirements.md and docs/incidents.md
  exists, and so does every module of the requirements index and every ADR cited.

Files are read relative to the repository root found from this file. This file itself is
not scanned: it has to spell the forms it forbids.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve()
REQUIREMENTS = REPO_ROOT / "docs" / "requirements.md"
INCIDENTS = REPO_ROOT / "docs" / "incidents.md"
DECISIONS = REPO_ROOT / "architecture" / "decisions"

#: Source, test, doc and page files: where requirement ids and incident names are cited.
SOURCE_SUFFIXES = frozenset({".py", ".md", ".js", ".html", ".lua", ".toml"})
#: Every text file the repository ships; a file without a suffix is a script (``.ci/run``).
TEXT_SUFFIXES = SOURCE_SUFFIXES | {".css", ".json", ".mako", ".cfg", ".ini", ".txt", ".sh", ""}
#: Tool caches and build output; any virtualenv (``pyvenv.cfg``) is skipped as well, such as
#: the peer systems' environments ``bench/peers`` builds under ``.venvs/``.
SKIPPED_DIRS = frozenset(
    {".git", ".venv", "build", "dist", "__pycache__", ".pytest_cache", ".ruff_cache"}
    | {".mypy_cache", ".hypothesis", "node_modules", "test-output"}
)

#: A requirement id: a family letter and a number, E1a's letter suffix, or the invariant I0.
#: Not a part of a longer token (``S18-02A``, ``A53-S2``, ``#W1``, ``path/E1``), not a
#: coordinate (``L10,5`` in SVG path data), not a lint code (stripped first, see ``_NOQA``).
#: A range is written with an en dash between its two ends; both ends count.
REQUIREMENT_ID = re.compile(
    r"(?<![\w#/.\-])(?:[EWVSCPRLK][1-9][0-9]{0,2}[a-z]?|I0)(?![\w\-]|[,.][0-9])"
)
_NOQA = re.compile(r"noqa:\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*")

#: One line of the requirements index: | Id | Requires | Where | Test | Status |
_INDEX_ROW = re.compile(
    r"^\| (?P<id>[A-Z][0-9]+[a-z]?) \| (?P<requires>[^|]+) \| (?P<where>[^|]+) \| "
    r"(?P<test>[^|]+) \| (?P<status>built|partly built|not built yet) \|$",
    re.MULTILINE,
)
_HEADING = re.compile(r"^### (?P<id>[A-Z][0-9]+[a-z]?) ", re.MULTILINE)

#: The earlier project's documents, which this repository does not contain, and the word its
#: citations of them used. This file must name them to forbid them; they are spelled in two
#: pieces so that it does not itself cite them (``_spelled`` puts them into a pattern).
_NAMES = {
    "<doc1>": "SP" + "EC",  # the contract
    "<doc2>": "ARCHI" + "TECTURE",  # the architecture notes
    "<doc3>": "STY" + "LE",  # the style guide
    "<word>": "se" + "ed",  # the earlier system's documents, as they were called
    "<dir>": "sha" + "red",  # the folder beside the checkout that held them
}


def _spelled(text: str) -> str:
    for placeholder, name in _NAMES.items():
        text = text.replace(placeholder, name)
    return text


#: A document outside the repository, cited by name, by path or as "the <word> …".
#: Precise forms only: a variable, a fixture or a parameter of that name, ``x: int`` after it,
#: or "each test <word>s its namespace" are not citations.
OUTSIDE_DOCUMENT = re.compile(
    _spelled(
        r"\b<doc1>(?:\.md)?\b|\b<doc2>(?:\.md)?\b|\b<doc3>(?:\.md)?\b"
        r"|\.\./<dir>\b|/work/<dir>\b|\b<dir>/<word>s\b|\b<word>s/"
        r"|(?i:\b<word>s?)\s+(?:plaita)?#[0-9]"
        r"|(?i:\b<word>s?)\s+(?:[A-Z][0-9]|[0-9]{3}\b|[0-9a-f]{7}\b)"
        r"|(?i:\b<word>s?)(?:'s|s')"
        r"|(?i:\b<word>s?)\s+(?:passages?|documents?|docs?|incidents?|ledger|rules?|system"
        r"|references?|defaults?|commit|says|text)\b"
        r"|(?i:\b<word>):\s*(?!(?:int|str|bytes|float|object|Any|None|Optional|random)\b)\S"
        r"|(?i:\b<word>)\s+[`\"“「\u0080-\uffff]"
        r"|\b[Tt]he <word>s?\b(?!\s+(?:value|number|of|for|passed|given|used|argument|parameter)\b)"
    )
)
_MAY_CITE_OUTSIDE = re.compile(_spelled(r"(?i:<word>)|<doc1>|<doc2>|<doc3>|<dir>"))
#: Chinese text: the old system's documents are in Chinese, so a quotation of them is.
CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")

#: An incident name. ``#50`` (not a markdown anchor ``operations.md#11-…``, an HTML entity or
#: a colour), ``plaita#50`` (the same tracker, written ``#50`` here), a review finding
#: ``A46-04`` / ``A47-F2`` / ``A53-S2`` / ``S18-02A`` (not a range such as ``W10-W12``), a
#: review round ``A2R31`` / ``B2R31-01`` / ``A2R25-04/05`` (two findings).
INCIDENT = re.compile(
    r"(?<![\w#&/.\-])#[0-9]{2,3}(?![\w\-])"
    r"|\bplaita#[0-9]+\b"
    r"|\b(?P<letter>[A-Z])[0-9]{2}-(?:[0-9]{2}[A-Z]?|(?!(?P=letter))[A-Z][0-9])(?:/[0-9]{2})*\b"
    r"|\b[A-Z][0-9]R[0-9]+(?:-[0-9]{2}(?:/[0-9]{2})*)?\b"
)
_INCIDENT_ROW = re.compile(r"^\| (?P<name>[^|]+?) \| [^|]+ \| [^|]+ \| (?P<tests>[^|]+) \|$", re.M)

#: A path into the repository quoted in a doc: ``tests/…``, optionally ``::Class::test``.
_TEST_PATH = re.compile(r"`(?P<path>tests/[\w./*\-]*)(?P<names>(?:::\w+)*)`")
_MODULE_PATH = re.compile(r"`(?P<path>[\w./*\-]+)`")
_ADR = re.compile(r"\bADR (?P<number>[0-9]{4})\b")


def _walk(suffixes: frozenset[str]) -> Iterator[Path]:
    for directory, subdirectories, files in os.walk(REPO_ROOT):
        subdirectories[:] = sorted(
            d
            for d in subdirectories
            if d not in SKIPPED_DIRS
            and not d.endswith(".egg-info")
            and not Path(directory, d, "pyvenv.cfg").exists()
        )
        for name in sorted(files):
            path = Path(directory, name)
            if path.suffix in suffixes and path.resolve() != THIS_FILE:
                yield path


@cache
def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


@cache
def _files(suffixes: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """(repository-relative path, text) of every text file with these suffixes."""
    return tuple(
        (path.relative_to(REPO_ROOT).as_posix(), text)
        for path in _walk(suffixes)
        if (text := _text(path)) is not None
    )


def _lines(
    suffixes: frozenset[str], worth_reading: re.Pattern[str] | None = None
) -> Iterator[tuple[str, int, str]]:
    """(path, line number, line) of every file with these suffixes; with ``worth_reading``,
    only of the files it finds something in (a cheap first pass over the whole text)."""
    for where, text in _files(suffixes):
        if worth_reading is None or worth_reading.search(text):
            for number, line in enumerate(text.splitlines(), 1):
                yield where, number, line


def cited_requirement_ids(text: str) -> list[str]:
    return REQUIREMENT_ID.findall(_NOQA.sub("", text))


def outside_citations(text: str) -> list[str]:
    return [m.group() for m in OUTSIDE_DOCUMENT.finditer(text)]


def incident_names(text: str) -> list[str]:
    """The incident names a text uses, each spelled as docs/incidents.md lists it."""
    names: list[str] = []
    for match in INCIDENT.finditer(text):
        name = match.group().removeprefix("plaita")
        head, *more = name.split("/")
        names.append(head)
        names.extend(head[: -len(suffix)] + suffix for suffix in more)
    return names


@cache
def requirement_index() -> dict[str, dict[str, str]]:
    text = REQUIREMENTS.read_text(encoding="utf-8")
    return {m["id"]: m.groupdict() for m in _INDEX_ROW.finditer(text)}


@cache
def incident_rows() -> dict[str, str]:
    text = INCIDENTS.read_text(encoding="utf-8")
    rows = {m["name"]: m["tests"] for m in _INCIDENT_ROW.finditer(text)}
    rows.pop("Incident", None)  # the header row
    return {name: tests for name, tests in rows.items() if name.strip("- ")}


# --- requirement ids --------------------------------------------------------------------


def test_the_index_lists_every_requirement_once_and_matches_the_sections() -> None:
    text = REQUIREMENTS.read_text(encoding="utf-8")
    rows = [m["id"] for m in _INDEX_ROW.finditer(text)]
    headings = [m["id"] for m in _HEADING.finditer(text)]

    assert len(rows) == len(set(rows)), "an id has two lines in the index"
    assert sorted(rows) == sorted(headings), "the index and the ### sections disagree"
    assert len(rows) > 80


def test_every_cited_requirement_id_is_listed() -> None:
    listed = set(requirement_index())
    unknown = [
        f"{where}:{number}: {found}"
        for where, number, line in _lines(SOURCE_SUFFIXES)
        for found in cited_requirement_ids(line)
        if found not in listed
    ]
    assert not unknown, "ids cited but not in docs/requirements.md:\n" + "\n".join(unknown)


def test_every_built_requirement_is_cited_outside_the_requirements_page() -> None:
    """A requirement with code is named by that code, its tests or a guide; one not built yet
    has nothing to cite it, honestly, so its line in the index is all there is."""
    cited = {
        found
        for where, _, line in _lines(SOURCE_SUFFIXES)
        if where not in ("docs/requirements.md", "docs/incidents.md")
        for found in cited_requirement_ids(line)
    }
    uncited = [
        requirement
        for requirement, row in requirement_index().items()
        if row["status"] != "not built yet" and requirement not in cited
    ]
    assert not uncited, f"built requirements no file cites: {uncited}"


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("Fenced writes (W4, S3) and W1\u2013W25", ["W4", "S3", "W1", "W25"]),
        ("E1a and I0; not I1-I5, S18-02A, A53-S2, nor  # noqa: E501", ["E1a", "I0"]),
        ('svg("path", { d: "M0,0 L10,5 L0,10 z" }) and W999', ["W999"]),
    ],
)
def test_the_id_pattern_finds_citations_only(text: str, ids: list[str]) -> None:
    assert cited_requirement_ids(text) == ids


# --- documents outside the repository ----------------------------------------------------


def test_no_file_cites_a_document_outside_the_repository() -> None:
    found = [
        f"{where}:{number}: {line.strip()}"
        for where, number, line in _lines(TEXT_SUFFIXES, _MAY_CITE_OUTSIDE)
        if outside_citations(line)
    ]
    assert not found, "citations of documents outside the repository:\n" + "\n".join(found)


def _prose(path: Path, text: str) -> Iterator[tuple[int, str]]:
    """Comments and docstrings of a Python file; all of any other file."""
    if path.suffix != ".py":
        yield from enumerate(text.splitlines(), 1)
        return
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring is not None:
                yield node.body[0].lineno, docstring


def test_no_comment_docstring_or_doc_quotes_the_old_documents_in_chinese() -> None:
    """Test data may hold any text (a city name in a payload); prose is English."""
    found = [
        f"{path.relative_to(REPO_ROOT)}:{number}"
        for path in _walk(SOURCE_SUFFIXES | {".css"})
        if (text := _text(path)) is not None and CJK.search(text)
        for number, prose in _prose(path, text)
        if CJK.search(prose)
    ]
    assert not found, "Chinese text in comments, docstrings or docs:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        "(<doc1> §9)",
        "see <doc2>.md",
        "<doc3>.md says",
        "<word>s/000 (FlowWorker)",
        "../<dir>/<doc1>.md",
        "W9, <word> #242: released",
        "E4 / <word> plaita#58",
        "W21; <word> A2R31",
        "E5 (<word> 001, quoted)",
        "Row 5 (W7, <word> 43828aa)",
        "the <word>'s rule",
        "<word> passages: renew",
        "W22; <word>: manual key",
        'W3, <word> "quoted": stop',
        "W3, <word> 长步骤",
        "as in the <word>.",
    ],
)
def test_the_outside_document_pattern_finds_each_form_of_citation(text: str) -> None:
    assert outside_citations(_spelled(text)), text


@pytest.mark.parametrize(
    "text",
    [
        "async def seed(execution_id: str) -> None:",
        "def seed_counters(self) -> Probe:",
        '@pytest.mark.parametrize("seed", [1, 2, 3])',
        "self, delay: RawDelayQueue, ready: TaskQueue, seed: int",
        "rng = random.Random(seed)",
        "return seed",
        "Each test seeds its own namespace",
        'leases.acquire(execution_id, "seed", ttl_ms=60_000)',
        "_HANDLER_SPECS_ATTRIBUTE = 1",
        "poison: seeded by the browser test",
        "the seed value of the generator",
    ],
)
def test_the_outside_document_pattern_leaves_seed_variables_alone(text: str) -> None:
    assert not outside_citations(text), text


# --- incidents ----------------------------------------------------------------------------


def test_every_incident_name_used_is_a_row_of_the_incidents_page() -> None:
    rows = set(incident_rows())
    unknown = [
        f"{where}:{number}: {name}"
        for where, number, line in _lines(SOURCE_SUFFIXES)
        if where != "docs/incidents.md"
        for name in incident_names(line)
        if name not in rows
    ]
    assert not unknown, "incident names without a row in docs/incidents.md:\n" + "\n".join(unknown)


def test_every_incident_row_is_used_elsewhere() -> None:
    used = {
        name
        for where, _, line in _lines(SOURCE_SUFFIXES)
        if where != "docs/incidents.md"
        for name in incident_names(line)
    }
    assert not set(incident_rows()) - used


def test_every_incident_row_names_a_test() -> None:
    untested = [name for name, tests in incident_rows().items() if not _TEST_PATH.search(tests)]
    assert len(incident_rows()) > 30
    assert not untested, f"incidents no test pins: {untested}"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (
            "(#50, #52, A46-04/A47-F2, B65-03, S18-02A)",
            ["#50", "#52", "A46-04", "A47-F2", "B65-03", "S18-02A"],
        ),
        (
            "A2R25-04/05, B2R31-01, A2R31, plaita#123",
            ["A2R25-04", "A2R25-05", "B2R31-01", "A2R31", "#123"],
        ),
        ("operations.md#11-operator-controls, &#123;, #333333, W10-W12, S1-S4, C1-C5", []),
    ],
)
def test_the_incident_pattern_finds_incidents_only(text: str, names: list[str]) -> None:
    assert incident_names(text) == names


# --- paths named in the docs --------------------------------------------------------------


def _defines(tree: ast.Module, names: list[str]) -> bool:
    """Whether ``Class::method`` or ``function`` is defined in the module (methods may be
    inherited from a base class of the same module)."""
    scope: list[ast.stmt] = tree.body
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for position, name in enumerate(names):
        found = next(
            (
                n
                for n in scope
                if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and n.name == name
            ),
            None,
        )
        if found is None and position > 0:
            owner = classes.get(names[position - 1])
            bases = [b.id for b in owner.bases if isinstance(b, ast.Name)] if owner else []
            return any(_defines(tree, [base, *names[position:]]) for base in bases)
        if found is None:
            return False
        scope = found.body if isinstance(found, ast.ClassDef) else []
    return True


@pytest.mark.parametrize("doc", [REQUIREMENTS, INCIDENTS], ids=lambda p: p.name)
def test_every_test_named_in_the_doc_exists(doc: Path) -> None:
    missing = []
    for match in _TEST_PATH.finditer(doc.read_text(encoding="utf-8")):
        path, names = match["path"], [n for n in match["names"].split("::") if n]
        files = sorted(REPO_ROOT.glob(path.rstrip("/")))
        if not files:
            missing.append(path)
        elif names and not _defines(ast.parse(files[0].read_text(encoding="utf-8")), names):
            missing.append(match.group().strip("`"))
    assert not missing, f"named in {doc.name} but not there: {missing}"


def test_every_module_of_the_requirements_index_exists() -> None:
    missing = [
        path
        for row in requirement_index().values()
        for cell in (row["where"], row["test"])
        for path in _MODULE_PATH.findall(cell)
        if not list(REPO_ROOT.glob(path.rstrip("/")))
    ]
    assert not missing


def test_every_cited_adr_exists() -> None:
    numbers = {p.name[:4] for p in DECISIONS.glob("[0-9][0-9][0-9][0-9]-*.md")}
    missing = [
        f"{where}:{number}: ADR {m['number']}"
        for where, number, line in _lines(SOURCE_SUFFIXES)
        for m in _ADR.finditer(line)
        if m["number"] not in numbers
    ]
    assert not missing
