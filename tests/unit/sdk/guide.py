"""docs/flows.md as the builder's tests read it: its fenced blocks and its Python section."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
GUIDE = REPO_ROOT / "docs" / "flows.md"
BUILDER_SECTION = "## Writing a flow in Python"


def fenced_blocks(text: str, language: str) -> list[str]:
    """The contents of every ```<language> block of ``text``, in order."""
    blocks, lines = [], text.splitlines()
    for index, line in enumerate(lines):
        if line.strip() == f"```{language}":
            end = lines.index("```", index + 1)
            blocks.append("\n".join(lines[index + 1 : end]))
    return blocks


def guide_text() -> str:
    return GUIDE.read_text(encoding="utf-8")


def flow_documents() -> list[str]:
    """Every flow document of the guide, the reference of the definition format first."""
    return [block for block in fenced_blocks(guide_text(), "json") if '"flow_id"' in block]


def builder_section() -> str:
    text = guide_text()
    assert BUILDER_SECTION in text, f"docs/flows.md has no section {BUILDER_SECTION!r}"
    return text.split(BUILDER_SECTION, 1)[1].split("\n## ", 1)[0]
