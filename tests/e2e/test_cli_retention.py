"""`plaita worker` takes the retention and the DLQ cap as flags and as PLAITA_* variables,
and refuses unusable ones before connecting (S5, W10, W21)."""

from __future__ import annotations

from click.testing import CliRunner

from plaita.entrypoints.cli import main

UNREACHABLE = "redis://127.0.0.1:1/0"


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.output


def test_a_zero_retention_and_dlq_cap_are_refused_together_with_exit_2() -> None:
    code, out = invoke(
        "worker", "--redis-url", UNREACHABLE, "--retention-days", "0", "--dlq-max-len", "0"
    )

    assert code == 2
    assert "retention_ms" in out and "dlq_max_len" in out and "2 invalid setting(s)" in out


def test_the_variables_are_read_when_no_flag_is_given() -> None:
    code, out = invoke(
        "worker",
        "--redis-url",
        UNREACHABLE,
        env={"PLAITA_RETENTION_DAYS": "-1", "PLAITA_DLQ_MAX_LEN": "0"},
    )

    assert code == 2 and "retention_ms" in out and "dlq_max_len" in out


def test_the_worker_help_names_both_flags() -> None:
    code, out = invoke("worker", "--help")

    assert code == 0 and "--retention-days" in out and "--dlq-max-len" in out
