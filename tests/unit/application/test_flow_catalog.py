"""The flow catalog: a tenant's lookups (its own definitions, else the deployment-wide ones),
immutable versions, and the flow cache (S2, W20, W24).

The rows L1-L5 and R1-R3 are those of ``plaita.domain.flow_owners``.
"""

from __future__ import annotations

import logging

import pytest

from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.application.tenancy import no_tenant_scope, tenant_scope
from plaita.application.use_cases.flows import FlowCatalog
from plaita.domain.errors import (
    FlowVersionConflictError,
    TenantContextMissingError,
    UnknownFlowError,
)
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED, FlowOwner, RegistrationOutcome

from .conftest import CountingRepository, FakeClock

ACME = FlowOwner.tenant("acme")
DEFAULT = FlowOwner.tenant("default")


def flow(flow_id: str = "f", version: str = "1", output: str = "'shared'") -> Flow:
    return Flow.from_document(
        {
            "flow_id": flow_id,
            "version": version,
            "start": "e",
            "nodes": [{"id": "e", "type": "end", "output": output}],
        }
    )


# --- the flow cache (W20) ---------------------------------------------------------------------


async def test_a_cached_flow_is_read_once_within_the_ttl(clock: FakeClock) -> None:
    repository = CountingRepository()
    catalog = FlowCatalog(repository, None, clock=clock, cache_ttl_ms=1000)
    await catalog.register(flow(), owner=SHARED)
    await catalog.get("f")
    reads = repository.reads
    for _ in range(5):
        await catalog.get("f")
    assert repository.reads == reads
    clock.advance(1)
    await catalog.get("f")
    assert repository.reads > reads


async def test_the_cache_keeps_at_most_its_size(clock: FakeClock) -> None:
    repository = CountingRepository()
    catalog = FlowCatalog(repository, None, clock=clock, cache_size=2)
    for name in "abc":
        await catalog.register(flow(name), owner=SHARED)
    for name in "abc":
        await catalog.get(name)
    reads = repository.reads
    await catalog.get("c")
    await catalog.get("b")
    assert repository.reads == reads
    await catalog.get("a")  # evicted: the least recently used
    assert repository.reads > reads


async def test_a_latest_registered_by_another_process_is_served_until_the_ttl_only(
    clock: FakeClock,
) -> None:
    """W20: a cached latest may be stale for at most the TTL, never longer."""
    repository = MemoryFlowRepository()
    catalog = FlowCatalog(repository, None, clock=clock, cache_ttl_ms=300_000)
    await catalog.register(flow(version="1"), owner=SHARED)
    assert (await catalog.get("f")).version == "1"
    # Another process registers version 2: this catalog's cache is not told.
    await repository.put_if_absent(flow(version="2", output="'two'"), owner=SHARED)

    clock.advance(299.999)
    assert (await catalog.get("f")).version == "1"
    clock.advance(0.001)
    assert (await catalog.get("f")).version == "2"


async def test_registering_through_the_catalog_is_seen_at_once(clock: FakeClock) -> None:
    catalog = FlowCatalog(MemoryFlowRepository(), None, clock=clock)
    await catalog.register(flow(version="1"), owner=SHARED)
    assert (await catalog.get("f")).version == "1"
    await catalog.register(flow(version="2", output="'two'"), owner=SHARED)
    assert (await catalog.get("f")).version == "2"


async def test_the_cache_never_serves_one_tenants_definition_to_another(
    clock: FakeClock,
) -> None:
    """W20, W24: the cache is keyed by tenant, so acme's copy never reaches default."""
    catalog = FlowCatalog(MemoryFlowRepository(), None, clock=clock)
    await catalog.register(flow(output="'shared'"), owner=SHARED)
    await catalog.register(flow(output="'acme'"), owner=ACME)
    shared, acme = flow(output="'shared'"), flow(output="'acme'")

    for _ in range(2):  # the second round is served from the cache
        for version in ("1", None):
            with tenant_scope("acme"):
                assert (await catalog.get("f", version)).fingerprint == acme.fingerprint
            with tenant_scope("default"):
                assert (await catalog.get("f", version)).fingerprint == shared.fingerprint


async def test_an_unknown_flow_is_a_named_error_and_not_cached(clock: FakeClock) -> None:
    catalog = FlowCatalog(MemoryFlowRepository(), None, clock=clock)
    with pytest.raises(UnknownFlowError, match="'ghost'"):
        await catalog.get("ghost")
    await catalog.register(flow("ghost"), owner=SHARED)
    assert (await catalog.get("ghost")).flow_id == "ghost"


# --- a tenant's lookups (L1-L5) ---------------------------------------------------------------


@pytest.fixture
async def catalog(clock: FakeClock) -> FlowCatalog:
    return FlowCatalog(MemoryFlowRepository(), None, clock=clock)


async def test_L1_a_tenants_own_version_wins_over_the_shared_one(catalog: FlowCatalog) -> None:
    await catalog.register(flow(output="'shared'"), owner=SHARED)
    await catalog.register(flow(output="'acme'"), owner=ACME)

    with tenant_scope("acme"):
        entry = await catalog.lookup("f", "1")
    assert entry.owner == ACME
    assert entry.flow.fingerprint == flow(output="'acme'").fingerprint


async def test_L2_a_version_the_tenant_lacks_is_the_shared_one(catalog: FlowCatalog) -> None:
    await catalog.register(flow(version="1", output="'acme'"), owner=ACME)
    await catalog.register(flow(version="2", output="'shared'"), owner=SHARED)

    with tenant_scope("acme"):
        entry = await catalog.lookup("f", "2")
    assert (entry.owner, entry.flow.version) == (SHARED, "2")


async def test_L3_a_version_nobody_has_is_a_named_error_naming_where_it_looked(
    catalog: FlowCatalog,
) -> None:
    await catalog.register(flow("other"), owner=SHARED)
    await catalog.register(flow("mine"), owner=ACME)

    with tenant_scope("acme"), pytest.raises(UnknownFlowError) as raised:
        await catalog.get("f", "9")
    message = str(raised.value)
    assert "'f' version '9'" in message
    assert "tenant 'acme' or deployment-wide" in message
    assert "mine, other" in message


async def test_L4_a_tenants_latest_comes_from_its_own_catalogue(catalog: FlowCatalog) -> None:
    """The shared catalogue's newer version is not the tenant's latest: no mixing."""
    await catalog.register(flow(version="1", output="'acme'"), owner=ACME)
    await catalog.register(flow(version="1", output="'shared'"), owner=SHARED)
    await catalog.register(flow(version="2", output="'shared'"), owner=SHARED)

    with tenant_scope("acme"):
        entry = await catalog.lookup("f")
    assert (entry.owner, entry.flow.version) == (ACME, "1")


async def test_L5_without_a_copy_a_tenants_latest_is_the_shared_latest(
    catalog: FlowCatalog,
) -> None:
    await catalog.register(flow(version="1"), owner=SHARED)
    await catalog.register(flow(version="2", output="'two'"), owner=SHARED)
    await catalog.register(flow(version="7", output="'acme'"), owner=ACME)

    with tenant_scope("default"):
        entry = await catalog.lookup("f")
    assert (entry.owner, entry.flow.version) == (SHARED, "2")


async def test_another_tenants_definition_is_never_found(catalog: FlowCatalog) -> None:
    await catalog.register(flow(), owner=ACME)

    with tenant_scope("default"), pytest.raises(UnknownFlowError, match="none"):
        await catalog.get("f")


async def test_a_lookup_outside_a_tenant_scope_fails_closed(catalog: FlowCatalog) -> None:
    """W24: which catalogue to read depends on the tenant; without one nothing is guessed."""
    await catalog.register(flow(), owner=SHARED)

    with no_tenant_scope():
        for lookup in (catalog.get("f"), catalog.lookup("f"), catalog.listing()):
            with pytest.raises(TenantContextMissingError):
                await lookup
        assert (await catalog.lookup("f", shared_only=True)).owner == SHARED


async def test_a_shared_only_lookup_skips_the_tenants_copy(catalog: FlowCatalog) -> None:
    await catalog.register(flow(output="'shared'"), owner=SHARED)
    await catalog.register(flow(output="'acme'"), owner=ACME)

    with tenant_scope("acme"):
        entry = await catalog.lookup("f", shared_only=True)
    assert entry.owner == SHARED


async def test_the_listing_shows_own_flows_over_shared_ones_and_says_whose(
    catalog: FlowCatalog,
) -> None:
    await catalog.register(flow("both", output="'shared'"), owner=SHARED)
    await catalog.register(flow("both", output="'acme'"), owner=ACME)
    await catalog.register(flow("common"), owner=SHARED)
    await catalog.register(flow("private"), owner=ACME)
    await catalog.register(flow("theirs"), owner=DEFAULT)

    with tenant_scope("acme"):
        listed = [(e.flow.flow_id, e.owner) for e in await catalog.listing()]
        shared = [(e.flow.flow_id, e.owner) for e in await catalog.listing(shared_only=True)]
    assert listed == [("both", ACME), ("common", SHARED), ("private", ACME)]
    assert shared == [("both", SHARED), ("common", SHARED)]


# --- immutable versions (R1-R3) ---------------------------------------------------------------


async def test_R2_registering_the_same_document_again_changes_nothing(
    catalog: FlowCatalog,
) -> None:
    """L5 of the library contract too: the latest never goes back to an older version."""
    first = await catalog.register(flow(version="1"), owner=SHARED)
    await catalog.register(flow(version="2", output="'two'"), owner=SHARED)

    again = await catalog.register(flow(version="1"), owner=SHARED)

    assert (first.outcome, again.outcome) == (
        RegistrationOutcome.CREATED,
        RegistrationOutcome.UNCHANGED,
    )
    assert not again.created
    with tenant_scope("default"):
        assert (await catalog.get("f")).version == "2"


async def test_R3_another_document_under_a_registered_version_is_refused(
    catalog: FlowCatalog, caplog: pytest.LogCaptureFixture
) -> None:
    original, rogue = flow(output="'original'"), flow(output="'rogue'")
    await catalog.register(original, owner=SHARED)

    with caplog.at_level(logging.WARNING), pytest.raises(FlowVersionConflictError) as raised:
        await catalog.register(rogue, owner=SHARED)

    conflict = raised.value
    assert (conflict.registered_fingerprint, conflict.given_fingerprint) == (
        original.fingerprint,
        rogue.fingerprint,
    )
    assert "deployment-wide" in str(conflict) and "new version" in str(conflict)
    with tenant_scope("default"):
        assert (await catalog.get("f", "1")).fingerprint == original.fingerprint
    [line] = [r.getMessage() for r in caplog.records if "flow.version_conflict" in r.getMessage()]
    assert f"registered={original.fingerprint} given={rogue.fingerprint}" in line


async def test_a_tenants_copy_of_a_shared_version_is_its_own_not_a_conflict(
    catalog: FlowCatalog,
) -> None:
    await catalog.register(flow(output="'original'"), owner=SHARED)

    copy = await catalog.register(flow(output="'acme'"), owner=ACME)

    assert copy.created
    with tenant_scope("default"):
        assert (await catalog.get("f", "1")).fingerprint == flow(output="'original'").fingerprint


async def test_checking_a_registration_writes_nothing(catalog: FlowCatalog) -> None:
    await catalog.register(flow(output="'original'"), owner=SHARED)

    assert await catalog.check_registration(flow("new"), owner=SHARED) is (
        RegistrationOutcome.CREATED
    )
    assert await catalog.check_registration(flow(output="'original'"), owner=SHARED) is (
        RegistrationOutcome.UNCHANGED
    )
    with pytest.raises(FlowVersionConflictError):
        await catalog.check_registration(flow(output="'rogue'"), owner=SHARED)
    with tenant_scope("default"), pytest.raises(UnknownFlowError):
        await catalog.get("new")
