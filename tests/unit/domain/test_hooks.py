"""Webhook definitions (V10): one reader for the hooks file, the admin API and the stores,
naming every problem and never the secret."""

from __future__ import annotations

from typing import Any

import pytest

from plaita.domain.errors import HookDefinitionError
from plaita.domain.hooks import (
    DEFAULT_REPLAY_WINDOW_SECONDS,
    DEFAULT_SIGNATURE_HEADER,
    DEFAULT_TIMESTAMP_HEADER,
    HookSecret,
    SecretKind,
    dump_hook,
    load_hook,
    parse_hook,
    parse_hooks,
)

SECRET = "whsec-0123456789abcdef"
VALID: dict[str, Any] = {
    "name": "payments",
    "event_type": "payment.settled",
    "correlation_id_pointer": "/order/id",
    "secret": SECRET,
}


def test_a_minimal_hook_takes_the_defaults() -> None:
    hook = parse_hook(VALID)
    assert hook.tenant_id == "default"
    assert hook.data_pointer == ""
    assert hook.signature_header == DEFAULT_SIGNATURE_HEADER == "X-Plaita-Signature"
    assert hook.timestamp_header == DEFAULT_TIMESTAMP_HEADER == "X-Plaita-Timestamp"
    assert hook.replay_window_seconds == DEFAULT_REPLAY_WINDOW_SECONDS == 300
    assert hook.secret == HookSecret(SecretKind.STORED, SECRET)


@pytest.mark.parametrize(
    ("ref", "kind", "value"),
    [
        ("env:PAYMENTS_SECRET", SecretKind.ENV, "PAYMENTS_SECRET"),
        ("file:/run/s", SecretKind.FILE, "/run/s"),
    ],
)
def test_a_secret_may_be_referenced(ref: str, kind: SecretKind, value: str) -> None:
    fields = {k: v for k, v in VALID.items() if k != "secret"}
    hook = parse_hook({**fields, "secret_ref": ref})
    assert hook.secret == HookSecret(kind, value)
    assert hook.describe()["secret_source"] == ref


# Every row: a change to a valid entry, and a fragment the refusal must name.
INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("name with a slash", {"name": "a/b"}, "hook name 'a/b'"),
    ("empty name", {"name": ""}, "name"),
    ("name not a string", {"name": 7}, "name"),
    ("blank event type", {"event_type": " "}, "event_type"),
    ("bad tenant", {"tenant": "a:b"}, "tenant id 'a:b'"),
    ("pointer without a slash", {"correlation_id_pointer": "order"}, "not a JSON pointer"),
    ("pointer with a bad escape", {"data_pointer": "/a~2"}, "not a JSON pointer"),
    ("short secret", {"secret": "short"}, "at least 16"),
    ("both secret and ref", {"secret_ref": "env:X"}, "exactly one of secret"),
    ("neither secret nor ref", {"secret": None}, "exactly one of secret"),
    ("ref of an unknown kind", {"secret": None, "secret_ref": "vault:x"}, "not a secret reference"),
    ("env ref without a name", {"secret": None, "secret_ref": "env:"}, "not a secret reference"),
    ("header with a space", {"signature_header": "X Sig"}, "not an HTTP header name"),
    ("one header twice", {"timestamp_header": "x-plaita-signature"}, "must be two headers"),
    ("window zero", {"replay_window_seconds": 0}, "replay_window_seconds"),
    ("window over a day", {"replay_window_seconds": 86_401}, "replay_window_seconds"),
    ("window true", {"replay_window_seconds": True}, "replay_window_seconds"),
    ("window as text", {"replay_window_seconds": "300"}, "replay_window_seconds"),
    ("unknown field", {"colour": "red"}, "colour: not a field of a hook"),
    ("missing event type", {"event_type": None}, "event_type: required"),
]


@pytest.mark.parametrize(
    ("change", "named"), [pytest.param(c, n, id=label) for label, c, n in INVALID]
)
def test_an_invalid_hook_is_refused_naming_the_problem(change: dict[str, Any], named: str) -> None:
    raw = {k: v for k, v in {**VALID, **change}.items() if v is not None}
    with pytest.raises(HookDefinitionError) as error:
        parse_hook(raw)
    assert named in str(error.value)
    assert SECRET not in str(error.value)


def test_a_short_secret_is_refused_without_showing_it() -> None:
    with pytest.raises(HookDefinitionError) as error:
        parse_hook({**VALID, "secret": "hunter2-secret"})
    assert "hunter2" not in str(error.value)


def test_a_hook_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(HookDefinitionError, match="JSON object, got list"):
        parse_hook([VALID])


def test_every_problem_of_every_entry_is_named_at_once() -> None:
    entries = [VALID, {**VALID, "secret": "x"}, {"name": "payments"}, "nonsense"]
    with pytest.raises(HookDefinitionError) as error:
        parse_hooks(entries, source="hooks.toml")
    message = str(error.value)
    assert "hooks.toml" in message
    assert "entry 1 ('payments'): secret" in message
    assert "entry 1 ('payments'): the name is taken by entry 0" in message
    assert "entry 2 ('payments'): event_type: required" in message
    assert "entry 3: a hook is a JSON object, got str" in message


def test_the_description_never_holds_the_secret() -> None:
    described = parse_hook(VALID).describe()
    assert SECRET not in str(described)
    assert described["secret_source"] == "stored"
    assert SECRET not in repr(parse_hook(VALID))


@pytest.mark.parametrize(
    "raw",
    [
        VALID,
        {
            **{k: v for k, v in VALID.items() if k != "secret"},
            "secret_ref": "env:S",
            "tenant": "acme",
            "data_pointer": "/data",
            "replay_window_seconds": 60,
            "signature_header": "X-Sig",
            "timestamp_header": "X-Time",
        },
    ],
)
def test_the_stored_form_reads_back_as_the_same_hook(raw: dict[str, Any]) -> None:
    hook = parse_hook(raw)
    assert parse_hook(hook.to_document()) == hook
    assert load_hook(dump_hook(hook)) == hook
    assert load_hook(dump_hook(hook).encode()) == hook


def test_an_unreadable_stored_hook_is_a_named_error() -> None:
    with pytest.raises(HookDefinitionError, match="not JSON"):
        load_hook("{")
    with pytest.raises(HookDefinitionError, match="stored hook 'x'"):
        load_hook('{"name": "x"}')


def test_the_entries_of_a_file_become_its_hooks_in_order() -> None:
    hooks = parse_hooks([VALID, {**VALID, "name": "refunds"}], source="hooks.json")
    assert [hook.name for hook in hooks] == ["payments", "refunds"]
