"""Suite-wide fixtures.

Every test runs inside the default tenant's scope (W24), the way a worker dispatch, an
operator command or an API request runs inside its tenant's. Tests of the fail-closed rule
leave it with ``plaita.application.tenancy.no_tenant_scope()``; tests of routing open other
tenants' scopes themselves. Code under test that opens its own scope (ProcessTask per
carrier, the CLI per ``--tenant``) is unaffected: scopes nest.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from plaita.application.tenancy import tenant_scope
from plaita.domain.tenancy import DEFAULT_TENANT


@pytest.fixture(autouse=True)
def default_tenant_scope() -> Iterator[None]:
    with tenant_scope(DEFAULT_TENANT):
        yield
