"""Tenants and their key namespaces (W24).

Every execution belongs to exactly one tenant. Its keys live in the tenant's namespace: the
base namespace itself (``plaita``) for the default tenant, ``<base>:<tenant>`` for any other.
The tenant is deliberately **not** a Redis Cluster hash tag (no braces): one tenant's
executions spread over the cluster like anyone else's, while the execution id stays the tag
that keeps one step's keys in one slot.
"""

from __future__ import annotations

import re

from plaita.domain.errors import InvalidTenantIdError, TenantMismatchError

DEFAULT_TENANT = "default"

MAX_TENANT_ID_LENGTH = 64

# Letters, digits and ``_ . -``, starting with a letter or digit: no ``:`` (it would make
# one tenant's namespace a prefix of another's keys), no braces (hash tags), no spaces.
_TENANT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def validate_tenant_id(tenant_id: str) -> str:
    """The tenant id unchanged, or InvalidTenantIdError naming the value and the rule."""
    if not isinstance(tenant_id, str) or not tenant_id:
        raise InvalidTenantIdError(
            f"a tenant id must be a non-empty string, got {tenant_id!r}; "
            f"use {DEFAULT_TENANT!r} for the default tenant"
        )
    if len(tenant_id) > MAX_TENANT_ID_LENGTH:
        raise InvalidTenantIdError(
            f"tenant id {tenant_id[:20]!r}… is {len(tenant_id)} characters long; "
            f"at most {MAX_TENANT_ID_LENGTH} are allowed"
        )
    if _TENANT_ID.fullmatch(tenant_id) is None:
        raise InvalidTenantIdError(
            f"tenant id {tenant_id!r} may hold only letters, digits, '_', '.' and '-' and must "
            "start with a letter or digit"
        )
    return tenant_id


def tenant_namespace(base: str, tenant_id: str) -> str:
    """The key namespace of ``tenant_id`` under the deployment's base namespace."""
    validate_tenant_id(tenant_id)
    return base if tenant_id == DEFAULT_TENANT else f"{base}:{tenant_id}"


def check_same_tenant(record_tenant: str, scope_tenant: str, what: str) -> None:
    """Refuse to store ``what`` of ``record_tenant`` in ``scope_tenant``'s namespace."""
    if record_tenant != scope_tenant:
        raise TenantMismatchError(
            f"{what} belongs to tenant {record_tenant!r} but the unit of work acts for tenant "
            f"{scope_tenant!r}; open tenant_scope({record_tenant!r}) to write it"
        )
