"""docs/flows.md: every annotated example runs through `plaita run` and gives the result shown.

An example is a ```json block preceded by one or more comments, one per run::

    <!-- example: name=NAME [input=JSON] [event=TYPE=JSON]... [with=NAME]...
         (expect=JSON | expect_error=ERROR) -->

``with=NAME`` gives the flow of the example called NAME to the run (``--with-flow``), for
its subflow and map nodes to start as children. Each run goes through the real CLI
in-process (click's CliRunner), from the repository root, with ``--handler-modules
examples.docs_handlers``: the same command a reader would type.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from plaita.application.use_cases.flows import validate_flow
from plaita.domain.flow import Flow
from plaita.entrypoints.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]
GUIDE = REPO_ROOT / "docs" / "flows.md"
HANDLER_MODULE = "examples.docs_handlers"

_ANNOTATION_START = "<!-- example:"
_KEY = re.compile(r"\s*(\w+)=")
_WORD = re.compile(r"[^\s=]+")
_DECODER = json.JSONDecoder()
_NO_EXPECT = object()


@dataclass(frozen=True)
class Example:
    name: str
    line: int
    document: str
    input: dict[str, Any] | None = None
    events: tuple[tuple[str, dict[str, Any]], ...] = ()
    expect: Any = _NO_EXPECT
    expect_error: str | None = None
    flow: dict[str, Any] = field(default_factory=dict, compare=False)
    children: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"example {self.name!r} (docs/flows.md line {self.line})"


def _parse_annotation(text: str, line: int, document: str) -> Example:
    """Read ``key=value`` pairs; JSON values are decoded in place, so they may hold spaces."""
    values: dict[str, Any] = {}
    events: list[tuple[str, dict[str, Any]]] = []
    children: list[str] = []
    pos = 0
    while (match := _KEY.match(text, pos)) is not None:
        key, pos = match.group(1), match.end()
        if key in ("name", "expect_error"):
            word = _WORD.match(text, pos)
            if word is None:
                raise ValueError(f"{key}= needs a value")
            values[key], pos = word.group(), word.end()
        elif key == "with":
            word = _WORD.match(text, pos)
            if word is None:
                raise ValueError("with= needs the name of another example")
            children.append(word.group())
            pos = word.end()
        elif key in ("input", "expect"):
            values[key], pos = _DECODER.raw_decode(text, pos)
        elif key == "event":
            event_type = _WORD.match(text, pos)
            if event_type is None or not text.startswith("=", event_type.end()):
                raise ValueError("event= must be written TYPE=JSON")
            data, pos = _DECODER.raw_decode(text, event_type.end() + 1)
            events.append((event_type.group(), data))
        else:
            raise ValueError(f"unknown annotation key {key!r}")
    if text[pos:].strip():
        raise ValueError(f"cannot read {text[pos:].strip()!r}")
    if "name" not in values:
        raise ValueError("an example needs name=")
    if ("expect" in values) == ("expect_error" in values):
        raise ValueError("give exactly one of expect= and expect_error=")
    if "input" in values and not isinstance(values["input"], dict):
        raise ValueError("input= must be a JSON object")
    return Example(
        name=values["name"],
        line=line,
        document=document,
        input=values.get("input"),
        events=tuple(events),
        expect=values.get("expect", _NO_EXPECT),
        expect_error=values.get("expect_error"),
        flow=json.loads(document),
        children=tuple(children),
    )


def _json_blocks(lines: list[str]) -> Iterator[tuple[int, str]]:
    """(index of the opening fence, text) of every ```json block."""
    index = 0
    while index < len(lines):
        if lines[index].strip() == "```json":
            end = index + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            yield index, "\n".join(lines[index + 1 : end])
            index = end
        index += 1


def _fenced_lines(lines: list[str]) -> set[int]:
    """Indexes of the lines inside fenced code blocks (where a comment is shown, not meant)."""
    inside, fenced = False, set()
    for index, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            fenced.add(index)
    return fenced


def parse_guide(text: str) -> tuple[list[Example], list[str]]:
    """Every annotated example of the guide, and every problem that makes one unreadable."""
    lines = text.splitlines()
    blocks = dict(_json_blocks(lines))
    fenced = _fenced_lines(lines)
    examples: list[Example] = []
    problems: list[str] = []
    index = 0
    while index < len(lines):
        if index in fenced or not lines[index].lstrip().startswith(_ANNOTATION_START):
            index += 1
            continue
        annotations: list[tuple[int, str]] = []
        while index < len(lines) and lines[index].lstrip().startswith(_ANNOTATION_START):
            start = index
            chunk = lines[index].lstrip()[len(_ANNOTATION_START) :]
            while "-->" not in chunk and index + 1 < len(lines):
                index += 1
                chunk += "\n" + lines[index]
            annotations.append((start + 1, chunk.partition("-->")[0]))
            index += 1
        if index not in blocks:
            problems.append(
                f"line {annotations[-1][0]}: an example comment must be followed directly by "
                "a ```json block"
            )
            continue
        for line, annotation in annotations:
            try:
                examples.append(_parse_annotation(annotation, line, blocks[index]))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                problems.append(f"line {line}: {exc}")
    names = [example.name for example in examples]
    problems += [
        f"example name {n!r} is used twice" for n in sorted(set(names)) if names.count(n) > 1
    ]
    problems += [
        f"{example}: with={child} names no example"
        for example in examples
        for child in example.children
        if child not in names
    ]
    return examples, problems


EXAMPLES, PROBLEMS = parse_guide(GUIDE.read_text(encoding="utf-8"))
SUCCEEDING = [example for example in EXAMPLES if example.expect_error is None]
BY_NAME = {example.name: example for example in EXAMPLES}


@pytest.fixture
def at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI imports handler modules from the cwd; PLAITA_* settings must not leak in."""
    monkeypatch.chdir(REPO_ROOT)
    for name in [n for n in os.environ if n.startswith("PLAITA_")]:
        monkeypatch.delenv(name)


def run_example(example: Example, tmp_path: Path, *extra: str) -> Result:
    flow_file = tmp_path / f"{example.name}.json"
    flow_file.write_text(example.document, encoding="utf-8")
    args = ["run", str(flow_file), "--handler-modules", HANDLER_MODULE]
    if example.input is not None:
        args += ["--input", json.dumps(example.input)]
    for event_type, data in example.events:
        args += ["--event", f"{event_type}={json.dumps(data)}"]
    for child in example.children:
        child_file = tmp_path / f"child-{child}.json"
        child_file.write_text(BY_NAME[child].document, encoding="utf-8")
        args += ["--with-flow", str(child_file)]
    return CliRunner().invoke(main, [*args, *extra], catch_exceptions=False)


def test_the_guide_has_well_formed_annotated_examples() -> None:
    assert not PROBLEMS, "unreadable examples in docs/flows.md:\n" + "\n".join(PROBLEMS)
    assert EXAMPLES, "docs/flows.md has no annotated examples: the guide would go untested"


def test_the_examples_cover_every_node_type_and_the_main_options() -> None:
    nodes = [node for example in EXAMPLES for node in example.flow["nodes"]]
    assert {node["type"] for node in nodes} >= {
        "task",
        "if",
        "switch",
        "event",
        "sleep",
        "parallel",
        "subflow",
        "map",
        "end",
    }
    assert any(node.get("retryTimes") for node in nodes)
    assert any(node.get("errorHandler", {}).get("strategy") == "continue_with" for node in nodes)
    assert any(node.get("timeoutHandler", {}).get("strategy") == "continue" for node in nodes)
    assert any(node["type"] == "switch" and "default" in node for node in nodes)
    assert any(example.events for example in EXAMPLES), "an event wait fed by --event"
    assert any(example.expect_error for example in EXAMPLES), "a failing example"


def test_every_flow_document_in_the_guide_is_valid() -> None:
    """Reference documents too, not only the runnable ones: the guide never shows a bad flow."""
    lines = GUIDE.read_text(encoding="utf-8").splitlines()
    documents = [text for _, text in _json_blocks(lines) if '"flow_id"' in text]
    assert len(documents) > len(EXAMPLES) / 3
    for text in documents:
        validate_flow(Flow.from_json(text), None)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda example: example.name)
def test_example_gives_the_documented_result(
    example: Example, tmp_path: Path, at_repo_root: None
) -> None:
    result = run_example(example, tmp_path)
    if example.expect_error is not None:
        assert result.exit_code == 1, f"{example} should fail; output:\n{result.output}"
        assert re.search(rf"\b{re.escape(example.expect_error)}\b", result.output), (
            f"{example} should fail with {example.expect_error}; output:\n{result.output}"
        )
        return
    assert result.exit_code == 0, f"{example} failed:\n{result.output}"
    assert json.loads(result.stdout) == example.expect, str(example)


@pytest.mark.parametrize("example", SUCCEEDING, ids=lambda example: example.name)
def test_example_streams_one_line_per_visited_node(
    example: Example, tmp_path: Path, at_repo_root: None
) -> None:
    """Generator mode: one JSON line per node, chained start → … → end (a parallel node's
    branches interleaved before their join), then the result."""
    result = run_example(example, tmp_path, "--stream")
    assert result.exit_code == 0, f"{example} failed with --stream:\n{result.output}"
    steps = [json.loads(line) for line in result.stdout.splitlines()]
    types = {node["id"]: node["type"] for node in example.flow["nodes"]}
    assert steps and steps[0]["node_id"] == example.flow["start"]
    if any(node["type"] == "parallel" for node in example.flow["nodes"]):
        # Branches interleave: each step's next node is still visited later (the join once).
        for index, step in enumerate(steps[:-1]):
            later = {following["node_id"] for following in steps[index + 1 :]}
            assert not step["is_end"] and step["next_node_id"] in later
    else:
        for step, following in itertools.pairwise(steps):
            assert not step["is_end"] and step["next_node_id"] == following["node_id"]
    for step in steps:
        assert step["node_type"] == types[step["node_id"]]
        assert not step["is_suspend"]
    assert steps[-1]["is_end"] and steps[-1]["next_node_id"] is None
    assert steps[-1]["result"] == example.expect
