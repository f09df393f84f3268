"""docs/flows.md, "Writing a flow in Python": the guide's Python example, run as a reader would
run it from the repository root, prints exactly the JSON document shown below it (which
tests/docs/test_flows_md.py runs through ``plaita run``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plaita.entrypoints.sdk.flow import Flow

from .guide import GUIDE, REPO_ROOT, builder_section, fenced_blocks


def test_the_python_example_prints_the_document_shown_below_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (example, *_) = fenced_blocks(builder_section(), "python")
    (shown, *_) = fenced_blocks(builder_section(), "json")
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.syspath_prepend(str(REPO_ROOT))  # `from examples.docs_handlers import …`
    namespace: dict[str, Any] = {"__name__": "order_review"}
    exec(compile(example, f"{GUIDE} (the Python example)", "exec"), namespace)
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(shown)
    flows = [value for value in namespace.values() if isinstance(value, Flow)]
    assert len(flows) == 1 and flows[0].to_dict() == printed
