"""``--redis-cluster`` and ``PLAITA_REDIS_CLUSTER``: the Redis URL becomes a cluster seed node;
``--partitions`` (``PLAITA_PARTITIONS``), the partition count of the task queue and the
notification stream, sits beside them.

Every command that takes ``--redis-url`` takes ``--redis-cluster`` beside it (the convention is
fixed: scripts and docs rely on it), and every way a command builds its settings sees it.
"""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from plaita.entrypoints.cli import main
from plaita.entrypoints.cli_support import redis_url_option, settings_from
from plaita.entrypoints.dev import dev_settings
from plaita.entrypoints.settings import Settings


@click.command()
@redis_url_option
def probe(redis_url: str) -> None:
    settings = settings_from(backend="redis", redis_url=redis_url)
    click.echo(f"{settings.redis_url} cluster={settings.redis_cluster}")


def run(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(probe, list(args), env=env or {}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output.strip()


def test_without_the_flag_the_url_is_a_single_node() -> None:
    assert run("--redis-url", "redis://10.0.0.1:6379/0") == "redis://10.0.0.1:6379/0 cluster=False"


def test_the_flag_makes_the_url_a_cluster_seed() -> None:
    assert run("--redis-url", "redis://10.0.0.1:7000", "--redis-cluster") == (
        "redis://10.0.0.1:7000 cluster=True"
    )


@pytest.mark.parametrize("value, expected", [("1", True), ("true", True), ("0", False)])
def test_the_environment_variable_does_the_same(value: str, expected: bool) -> None:
    output = run("--redis-url", "redis://10.0.0.1:7000", env={"PLAITA_REDIS_CLUSTER": value})
    assert output == f"redis://10.0.0.1:7000 cluster={expected}"


def test_a_bad_environment_value_is_a_named_error() -> None:
    result = CliRunner().invoke(
        probe, ["--redis-url", "redis://x:1"], env={"PLAITA_REDIS_CLUSTER": "sometimes"}
    )
    assert result.exit_code == 2
    assert "redis_cluster" in result.output


def test_every_command_with_a_redis_url_takes_the_flag() -> None:
    def commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
        found = []
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                found += commands(command, f"{prefix}{name} ")
            else:
                found.append((f"{prefix}{name}", command))
        return found

    with_url = {
        name: {option for param in command.params for option in getattr(param, "opts", [])}
        for name, command in commands(main)
        if any("--redis-url" in getattr(param, "opts", []) for param in command.params)
    }
    assert len(with_url) >= 20, sorted(with_url)
    assert {name for name, options in with_url.items() if "--redis-cluster" not in options} == set()
    assert {name for name, options in with_url.items() if "--partitions" not in options} == set()


@click.command()
@redis_url_option
def partitions_probe(redis_url: str) -> None:
    click.echo(settings_from(backend="redis", redis_url=redis_url).partitions)


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, "1"),
        (["--partitions", "3"], {}, "3"),
        ([], {"PLAITA_PARTITIONS": "8"}, "8"),
        (["--partitions", "2"], {"PLAITA_PARTITIONS": "8"}, "2"),
    ],
)
def test_partitions_beside_the_url_flag_then_environment_then_1(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    result = CliRunner().invoke(
        partitions_probe, ["--redis-url", "redis://x:1", *args], env=env, catch_exceptions=False
    )
    assert (result.exit_code, result.output.strip()) == (0, expected)


@pytest.mark.parametrize(
    ("args", "env"), [(["--partitions", "0"], {}), ([], {"PLAITA_PARTITIONS": "1025"})]
)
def test_a_partition_count_outside_1_to_1024_exits_2(args: list[str], env: dict[str, str]) -> None:
    result = CliRunner().invoke(partitions_probe, ["--redis-url", "redis://x:1", *args], env=env)
    assert result.exit_code == 2
    assert "partitions" in result.output


def test_plaita_dev_passes_it_on() -> None:
    settings = dev_settings(
        redis_url="redis://10.0.0.1:7000", handler_modules=(), redis_cluster=True
    )
    assert (settings.backend, settings.redis_cluster) == ("redis", True)
    assert Settings().redis_cluster is False
