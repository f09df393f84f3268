"""The Python on README.md's first screen and the one-process example of docs/python.md run
as written (on the memory twin, and the README's on the real Redis it names a URL for)."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)

pytestmark = pytest.mark.timeout(60)


def python_blocks(path: Path) -> list[str]:
    return PYTHON_BLOCK.findall(path.read_text(encoding="utf-8"))


async def run_block(source: str) -> dict[str, Any]:
    """Run ``source`` — top-level ``async with`` and ``await`` allowed, as in the docs —
    inside a coroutine; what it printed is returned under ``printed``."""
    printed: list[Any] = []
    body = textwrap.indent(source, "    ")
    namespace: dict[str, Any] = {"print": printed.append}
    exec(compile(f"async def _example():\n{body}\n", "<docs>", "exec"), namespace)
    await namespace["_example"]()
    return {"printed": printed, **namespace}


@pytest.mark.parametrize("store", ["memory", "redis"])
async def test_the_readme_example_runs_and_prints_the_decision(store: str, namespace: str) -> None:
    block = python_blocks(REPO_ROOT / "README.md")[0]
    assert "plaita.Client(" in block and "handle.result(" in block
    if store == "memory":
        block = block.replace('"redis://127.0.0.1:6379/0"', '"memory://"')
    else:
        block = block.replace(
            '"redis://127.0.0.1:6379/0"', repr(os.environ["PLAITA_TEST_REDIS_URL"])
        )
    ran = await run_block(block)
    assert ran["printed"] == [{"approved": True, "by": "approver"}]


async def test_the_one_process_example_of_docs_python_md_runs(namespace: str) -> None:
    blocks = python_blocks(REPO_ROOT / "docs" / "python.md")
    flow_block, one_process = blocks[0], blocks[1]
    assert 'plaita.Client("memory://")' in one_process
    ran = await run_block(flow_block + one_process.replace("asyncio.run(main())", "await main()"))
    assert ran["printed"] == [{"approved": True, "by": "approver"}]
