"""The tenant a unit of work acts for (W24).

A unit of work — one dispatch of a carrier, one operator command, one API request, one
event routed to a subscription — runs inside ``tenant_scope(tenant_id)``. The adapters that
hold execution data (state, node results, leases, fences, counters, heartbeats, tombstones)
route their keys by ``current_tenant()`` and raise ``TenantContextMissingError`` when no
scope is open: a code path that lost its tenant fails closed instead of reading or writing
the default tenant's data.

The scope is a ``contextvars`` value, so tasks created inside a scope (the lease watchdog of
a dispatch) keep it, and concurrent dispatches of different tenants never see each other's.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from plaita.domain.errors import TenantContextMissingError
from plaita.domain.tenancy import validate_tenant_id

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("plaita_tenant", default=None)


@contextmanager
def tenant_scope(tenant_id: str) -> Iterator[str]:
    """Run the body for ``tenant_id`` (validated); scopes nest and restore on exit."""
    token = _current.set(validate_tenant_id(tenant_id))
    try:
        yield tenant_id
    finally:
        _current.reset(token)


@contextmanager
def no_tenant_scope() -> Iterator[None]:
    """Run the body with no tenant at all (tests of the fail-closed rule)."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


def current_tenant() -> str:
    """The tenant of the unit of work in progress; TenantContextMissingError outside one."""
    tenant_id = _current.get()
    if tenant_id is None:
        raise TenantContextMissingError(
            "execution data was accessed outside a tenant scope; wrap the unit of work in "
            "plaita.application.tenancy.tenant_scope(tenant_id) (W24: plaita fails closed "
            "rather than guess a tenant)"
        )
    return tenant_id
