"""The hooks file (V10): JSON or TOML, read once at start-up, every problem named at once —
and a console that cannot use it does not start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plaita.adapters.secrets import EnvironmentSecrets
from plaita.domain.errors import HooksFileError
from plaita.domain.hooks import HookSecret, SecretKind
from plaita.entrypoints.hooks_file import load_hooks_file

SECRET = "whsec-0123456789abcdef"
READ = EnvironmentSecrets({"PAYMENTS_SECRET": SECRET}).read

TOML = """
[[hooks]]
name = "payments"
event_type = "payment.settled"
correlation_id_pointer = "/order/id"
secret_ref = "env:PAYMENTS_SECRET"

[[hooks]]
name = "approvals"
event_type = "approval_decision"
tenant = "acme"
correlation_id_pointer = "/execution_id"
data_pointer = "/decision"
secret = "whsec-0123456789abcdef"
replay_window_seconds = 60
"""


def test_no_file_is_no_hooks() -> None:
    assert load_hooks_file(None, READ) == ()


def test_a_toml_file_and_its_json_twin_give_the_same_hooks(tmp_path: Path) -> None:
    toml = tmp_path / "hooks.toml"
    toml.write_text(TOML)
    from_toml = load_hooks_file(str(toml), READ)
    twin = tmp_path / "hooks.json"
    twin.write_text(json.dumps({"hooks": [hook.to_document() for hook in from_toml]}))
    assert load_hooks_file(str(twin), READ) == from_toml
    assert [hook.name for hook in from_toml] == ["payments", "approvals"]
    assert from_toml[0].secret == HookSecret(SecretKind.ENV, "PAYMENTS_SECRET")
    assert from_toml[1].replay_window_seconds == 60


@pytest.mark.parametrize(
    ("name", "text", "named"),
    [
        ("hooks.yaml", "hooks: []", "must end in .json or .toml"),
        ("hooks.json", "{", "not valid JSON"),
        ("hooks.toml", "[[hooks]\n", "not valid TOML"),
        ("hooks.json", "[]", "must hold one key, 'hooks'"),
        ("hooks.json", '{"hooks": [], "extra": 1}', "it also holds ['extra']"),
        ("hooks.json", '{"hooks": {}}', "a list of hook definitions"),
        ("hooks.json", '{"hooks": [{"name": "a"}, {"name": "a"}]}', "the name is taken by entry 0"),
        (
            "hooks.json",
            '{"hooks": [{"name": "a", "event_type": "t", "correlation_id_pointer": "/id", '
            '"secret_ref": "env:UNSET_SECRET"}]}',
            "secret_ref env:UNSET_SECRET does not resolve",
        ),
    ],
)
def test_a_file_that_cannot_be_used_is_refused_by_name(
    tmp_path: Path, name: str, text: str, named: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(HooksFileError) as error:
        load_hooks_file(str(path), READ)
    assert named in str(error.value)
    assert str(path) in str(error.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(HooksFileError, match=r"cannot read the hooks file .*PLAITA_HOOKS_FILE"):
        load_hooks_file(str(tmp_path / "absent.json"), READ)


def test_a_secret_in_the_file_never_reaches_the_error(tmp_path: Path) -> None:
    path = tmp_path / "hooks.json"
    path.write_text(json.dumps({"hooks": [{"name": "a", "secret": "hunter2-short"}]}))
    with pytest.raises(HooksFileError) as error:
        load_hooks_file(str(path), READ)
    assert "hunter2" not in str(error.value)
