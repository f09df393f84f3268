"""``bench/peers/run.py --smoke`` runs end to end and writes only between its markers.

The smoke run compares plaita with Dramatiq, the cheapest peer: one small virtualenv
(built from PyPI on the first run into ``bench/peers/.venvs/``, or ``PLAITA_PEERS_VENVS``,
and reused afterwards), no PostgreSQL. It starts its own redis-server and its plaita worker
processes, so it is a ``process`` test; with the virtualenv cached it takes well under a
minute. The marker replacement is checked on a temp file, without any process.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN = REPO_ROOT / "bench" / "peers" / "run.py"


def load_run() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_peers_run", RUN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Its dataclasses look their module up in sys.modules while the class is made.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_results_are_written_between_the_markers_only(tmp_path: Path) -> None:
    run = load_run()
    results = tmp_path / "RESULTS.md"
    results.write_text("# Before\n\nkept\n", encoding="utf-8")

    run.write_results(results, "first")
    run.write_results(results, "second")
    results.write_text(results.read_text(encoding="utf-8") + "\n# After\n", encoding="utf-8")
    run.write_results(results, "third")

    text = results.read_text(encoding="utf-8")
    assert text.startswith("# Before\n\nkept\n")
    assert text.count(run.SECTION_HEADING) == 1
    assert f"{run.BEGIN_MARKER}\nthird\n{run.END_MARKER}" in text
    assert "first" not in text and "second" not in text
    assert text.endswith("\n# After\n")


@pytest.mark.process
@pytest.mark.timeout(900)
def test_smoke_run_against_dramatiq(tmp_path: Path) -> None:
    assert shutil.which("redis-server"), "the harness starts its own redis-server"
    results = tmp_path / "RESULTS.md"
    # Bounded: building the Dramatiq virtualenv the first time, then < 60 s.
    done = subprocess.run(
        [sys.executable, str(RUN), "--smoke", "--peers", "dramatiq", "--results", str(results)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for expected in ("| 1 | plaita |", "| 1 | plaita-2w |", "| 1 | dramatiq |"):
        assert expected in done.stdout
    assert "plaita event latency" in done.stdout
    assert "suspended on its event" in done.stdout
    text = results.read_text(encoding="utf-8")
    assert "<!-- peers:begin -->" in text and "<!-- peers:end -->" in text
    assert "P1: plaita ≥ 3x Dramatiq steps/s" in text
