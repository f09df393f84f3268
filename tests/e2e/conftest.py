"""The commands run as the ``plaita`` process runs them: outside every tenant scope.

The suite-wide default tenant scope would hide a command that touches execution data without
opening its tenant's scope (W24) — as ``plaita demo`` once did: it passed here and failed as a
process. Set-up that reads or writes execution data opens its scope itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from plaita.application.tenancy import current_tenant, no_tenant_scope, tenant_scope
from plaita.domain.errors import TenantContextMissingError
from plaita.domain.tenancy import DEFAULT_TENANT


@pytest.fixture(autouse=True)
def default_tenant_scope() -> Iterator[None]:
    with no_tenant_scope():
        yield


def seeding_scope() -> contextlib.AbstractContextManager[object]:
    """For a test's own set-up: the tenant scope the test opened, else the default tenant's."""
    try:
        current_tenant()
    except TenantContextMissingError:
        return tenant_scope(DEFAULT_TENANT)
    return contextlib.nullcontext()
