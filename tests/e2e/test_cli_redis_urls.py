"""A Redis URL of a wrong scheme is a named error and exit 2 on every command that takes one.

The commands are found by walking the ``plaita`` command tree, so a command added later with
``--redis-url`` is checked too; each is given placeholder arguments it would accept, so the
URL is the only thing wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from plaita.entrypoints.cli import main
from plaita.entrypoints.cli_support import IdParam

REPO_ROOT = Path(__file__).resolve().parents[2]
APPROVAL = str(REPO_ROOT / "examples" / "flows" / "approval.json")
WRONG_URLS = ["http://127.0.0.1:6379/0", "127.0.0.1:6379", "redis//127.0.0.1:6379", "memory://"]


def commands_with_a_redis_url(
    group: click.Group = main, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands_with_a_redis_url(command, (*path, name))
        elif any(param.name == "redis_url" for param in command.params):
            yield (*path, name), command


def placeholders(command: click.Command) -> list[str]:
    """Arguments the command accepts, so only the URL is wrong."""
    values = []
    for param in command.params:
        if isinstance(param, click.Option) and param.required and param.name != "redis_url":
            values += [param.opts[0], "placeholder"]
        if not isinstance(param, click.Argument):
            continue
        if isinstance(param.type, click.Choice):
            values.append(str(param.type.choices[0]))
        elif isinstance(param.type, click.Path):
            values.append(APPROVAL)
        elif isinstance(param.type, IdParam):
            values.append("placeholder-1")
        else:
            values.append("1-0" if param.name == "dlq_id" else "placeholder")
    return values


COMMANDS = list(commands_with_a_redis_url())


def test_the_walk_finds_every_family_of_commands() -> None:
    found = {" ".join(path) for path, _ in COMMANDS}
    assert {
        "executions start",
        "executions show",
        "executions wait",
        "executions bulk",
        "events publish",
        "flows register",
        "workers list",
        "dlq replay",
        "reap",
        "recover",
        "worker",
        "event-filter",
        "console",
        "dev",
    } <= found


#: (command, how the URL is given): as the flag, and as PLAITA_REDIS_URL wherever the flag
#: reads it (``plaita dev`` reads its Redis URL from its flag alone).
CASES = [
    (path, command, given)
    for path, command in COMMANDS
    for given in ("flag", "env")
    if not (given == "env" and path == ("dev",))
]


@pytest.mark.parametrize("url", WRONG_URLS)
@pytest.mark.parametrize(
    ("path", "command", "given"),
    CASES,
    ids=[f"{' '.join(path)}-{given}" for path, _, given in CASES],
)
def test_a_wrong_scheme_is_a_named_error_and_exit_2(
    path: tuple[str, ...],
    command: click.Command,
    given: str,
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # no plaita dev here
    args = [*path, *placeholders(command)]
    if given == "flag":
        result = CliRunner().invoke(main, [*args, "--redis-url", url], catch_exceptions=False)
    else:
        result = CliRunner().invoke(
            main, args, env={"PLAITA_REDIS_URL": url}, catch_exceptions=False
        )

    assert result.exit_code == 2, result.output
    assert "InvalidRedisUrlError" in result.output and repr(url) in result.output
    assert "Traceback" not in result.output


def test_the_settings_hold_the_rule_for_a_process_that_reads_the_environment_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from plaita.domain.errors import InvalidConfigurationError
    from plaita.entrypoints.settings import Settings, worker_settings

    monkeypatch.setenv("PLAITA_REDIS_URL", "http://127.0.0.1:6379")
    with pytest.raises(InvalidConfigurationError, match="InvalidRedisUrlError"):
        worker_settings({"backend": "redis"})
    # A process on the memory twin never opens it, so a stray value there is not an error.
    assert Settings(backend="memory").redis_url == "http://127.0.0.1:6379"
