"""Tenant ids and their key namespaces (W24)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plaita.domain.errors import InvalidTenantIdError
from plaita.domain.tenancy import (
    DEFAULT_TENANT,
    MAX_TENANT_ID_LENGTH,
    tenant_namespace,
    validate_tenant_id,
)


@pytest.mark.parametrize("tenant_id", ["default", "acme", "a", "Team-7.eu_west", "9" * 64])
def test_valid_tenant_ids_are_returned_unchanged(tenant_id: str) -> None:
    assert validate_tenant_id(tenant_id) == tenant_id


@pytest.mark.parametrize(
    ("tenant_id", "named"),
    [
        ("", "non-empty"),
        ("a:b", "'a:b'"),
        ("{acme}", "'{acme}'"),
        ("acme corp", "'acme corp'"),
        ("_acme", "start with a letter or digit"),
        ("x" * (MAX_TENANT_ID_LENGTH + 1), "at most 64"),
    ],
)
def test_invalid_tenant_ids_are_named(tenant_id: str, named: str) -> None:
    with pytest.raises(InvalidTenantIdError, match=named):
        validate_tenant_id(tenant_id)


def test_a_non_string_tenant_is_refused() -> None:
    with pytest.raises(InvalidTenantIdError, match="non-empty string"):
        validate_tenant_id(7)  # type: ignore[arg-type]


def test_the_default_tenant_keeps_the_base_namespace() -> None:
    assert tenant_namespace("plaita", DEFAULT_TENANT) == "plaita"
    assert tenant_namespace("plaita", "acme") == "plaita:acme"  # no braces: not a hash tag


@given(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True),
)
def test_two_tenants_never_share_a_namespace(first: str, second: str) -> None:
    if first != second:
        assert tenant_namespace("plaita", first) != tenant_namespace("plaita", second)
