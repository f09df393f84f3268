"""The public API is typed (L1, L2): an application's module that uses it as documented passes
``mypy --strict``, and the mistakes the types exist to catch (a misspelt keyword, an unknown
strategy, a handler of the wrong shape …) fail with the expected mypy errors.

mypy runs as an application would run it: the venv's ``python -m mypy`` with only
``strict = True`` (not this repository's configuration), from a directory outside the
repository, against the installed ``plaita``, with its own cache under ``tmp_path``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GOOD = FIXTURES / "uses_the_api.py"
BAD = FIXTURES / "misspelt_keyword.py"
_EXPECTED = re.compile(r"^\s*#\s*expected error:\s*\[(?P<code>[a-z-]+)\]\s*(?P<text>.+)$")
_REPORTED = re.compile(r":(?P<line>\d+): error: (?P<message>.*)\s+\[(?P<code>[a-z-]+)\]$")


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, tuple[int, str]]:
    """Both fixtures checked once (the second run reuses the first one's cache)."""
    home = tmp_path_factory.mktemp("mypy")
    config = home / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\n", encoding="utf-8")
    results = {}
    for fixture in (GOOD, BAD):
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--config-file",
                str(config),
                "--cache-dir",
                str(home / "cache"),
                "--show-error-codes",
                "--no-pretty",
                "--no-error-summary",
                str(fixture),
            ],
            cwd=home,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        results[fixture] = (completed.returncode, completed.stdout + completed.stderr)
    return results


def expected_errors(path: Path) -> dict[int, tuple[str, str]]:
    """line -> (code, text) from the ``# expected error:`` comment above each line."""
    expected = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _EXPECTED.search(line)
        if match:
            expected[number + 1] = (match["code"], match["text"].strip())
    return expected


def test_a_module_using_the_api_passes_mypy_strict(
    mypy_run: dict[Path, tuple[int, str]],
) -> None:
    code, output = mypy_run[GOOD]
    assert code == 0, output
    assert "error" not in output


def test_mistakes_fail_with_the_expected_mypy_errors(
    mypy_run: dict[Path, tuple[int, str]],
) -> None:
    code, output = mypy_run[BAD]
    expected = expected_errors(BAD)
    assert len(expected) >= 8, "the fixture's markers were not read"
    reported: dict[int, list[tuple[str, str]]] = {}
    for line in output.splitlines():
        match = _REPORTED.search(line)
        if match:
            reported.setdefault(int(match["line"]), []).append((match["code"], match["message"]))
    assert code == 1, output
    assert set(reported) == set(expected), output
    for number, (error_code, text) in expected.items():
        assert any(
            reported_code == error_code and text in message
            for reported_code, message in reported[number]
        ), f"line {number}: expected [{error_code}] {text!r}; mypy said:\n{output}"
