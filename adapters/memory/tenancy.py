"""How the memory twin keeps tenants apart: execution data is keyed by (tenant, id) (W24)."""

from __future__ import annotations

from plaita.application.tenancy import current_tenant

#: (tenant id, execution id): the memory twin's equivalent of a tenant-namespaced key.
ScopedId = tuple[str, str]


def scoped(execution_id: str) -> ScopedId:
    """``execution_id`` in the current tenant; TenantContextMissingError outside a scope."""
    return (current_tenant(), execution_id)
