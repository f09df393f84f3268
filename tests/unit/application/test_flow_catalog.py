"""The flow catalog: a tenant's lookups (its own definitions, else the deployment-wide ones),
immutable versions, the latest version, what a registration checks of the handlers, and the
flow cache (S2, W20, W24).

The rows L1-L5 and R1-R3 are those of ``plaita.domain.flow_owners``, V1-V5 those of
``plaita.domain.flow_versions``.
"""

from __future__ import annotations

import logging
import sys
import types

import pytest

from plaita.adapters.memory.flows import MemoryFlowRepository
from plaita.application.handlers import HandlerAllowlist, HandlerRegistry
from plaita.application.tenancy import no_tenant_scope, tenant_scope
from plaita.application.use_cases.flows import LATEST_MOVE_ATTEMPTS, FlowCatalog
from plaita.domain.errors import (
    FlowLatestContendedError,
    FlowVersionConflictError,
    HandlerNotAllowedError,
    TenantContextMissingError,
    UnknownFlowError,
    UnknownHandlerError,
)
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import SHARED, FlowOwner, RegistrationOutcome
from plaita.domain.flow_versions import LatestDecision, LatestReason

from .conftest import CountingRepository, FakeClock, one_task

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
    other_process = FlowCatalog(repository, None, clock=clock)
    await other_process.register(flow(version="2", output="'two'"), owner=SHARED)

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


# --- which version is the latest (V1-V5 of plaita.domain.flow_versions) ----------------------


async def test_an_older_version_registered_after_a_newer_one_does_not_become_latest(
    catalog: FlowCatalog,
) -> None:
    await catalog.register(flow(version="2", output="'two'"), owner=SHARED)

    older = await catalog.register(flow(version="1"), owner=SHARED)

    assert older.created and not older.is_latest
    assert older.latest == LatestDecision("1", "2", LatestReason.LOWER)
    with tenant_scope("default"):
        assert (await catalog.get("f")).version == "2"
        assert [e.flow.version for e in await catalog.listing()] == ["2"]


async def test_the_version_order_is_natural_not_the_order_of_registration(
    catalog: FlowCatalog,
) -> None:
    for version in ("1.9", "1.10", "1.2"):
        await catalog.register(flow("dotted", version), owner=SHARED)
    for version in ("v1", "v10", "v9"):
        await catalog.register(flow("named", version), owner=SHARED)

    with tenant_scope("default"):
        assert (await catalog.get("dotted")).version == "1.10"
        assert (await catalog.get("named")).version == "v10"


async def test_an_explicit_latest_is_a_rollback_also_of_a_registered_version(
    catalog: FlowCatalog,
) -> None:
    await catalog.register(flow(version="1"), owner=SHARED)
    await catalog.register(flow(version="2", output="'two'"), owner=SHARED)
    with tenant_scope("default"):
        assert (await catalog.get("f")).version == "2"  # cached now

    rollback = await catalog.register(flow(version="1"), owner=SHARED, latest=True)

    assert rollback.outcome is RegistrationOutcome.UNCHANGED
    assert rollback.latest == LatestDecision("1", "2", LatestReason.CHOSEN)
    with tenant_scope("default"):
        assert (await catalog.get("f")).version == "1", "the cache was emptied"
    # A higher version registered later is the latest again, by the rule.
    higher = await catalog.register(flow(version="3", output="'three'"), owner=SHARED)
    assert higher.latest.reason is LatestReason.HIGHER and higher.is_latest


async def test_registering_the_same_document_again_heals_an_interrupted_registration(
    clock: FakeClock,
) -> None:
    """A process that stored version 2 and died before moving the latest: the same document
    registered again is UNCHANGED and applies the rule."""
    repository = MemoryFlowRepository()
    catalog = FlowCatalog(repository, None, clock=clock)
    await catalog.register(flow(version="1"), owner=SHARED)
    await repository.put_if_absent(flow(version="2", output="'two'"), owner=SHARED)  # died here
    assert await repository.latest_version("f", owner=SHARED) == "1"

    again = await catalog.register(flow(version="2", output="'two'"), owner=SHARED)

    assert again.outcome is RegistrationOutcome.UNCHANGED
    assert again.latest == LatestDecision("2", "1", LatestReason.HIGHER)
    assert await repository.latest_version("f", owner=SHARED) == "2"


async def test_a_conflict_moves_no_latest_even_when_chosen(catalog: FlowCatalog) -> None:
    await catalog.register(flow(version="1", output="'original'"), owner=SHARED)
    await catalog.register(flow(version="2", output="'two'"), owner=SHARED)

    with pytest.raises(FlowVersionConflictError):
        await catalog.register(flow(version="1", output="'rogue'"), owner=SHARED, latest=True)

    with tenant_scope("default"):
        assert (await catalog.get("f")).version == "2"


async def test_a_moved_latest_is_logged_with_where_it_came_from(
    catalog: FlowCatalog, caplog: pytest.LogCaptureFixture
) -> None:
    await catalog.register(flow(version="1"), owner=ACME)
    with caplog.at_level(logging.INFO, logger="plaita.flows"):
        await catalog.register(flow(version="2", output="'two'"), owner=ACME)
        await catalog.register(flow(version="1"), owner=ACME)
        await catalog.register(flow(version="1"), owner=ACME, latest=True)

    lines = [r.getMessage() for r in caplog.records]
    assert any(
        "event=flow.registered flow_id=f version=2 owner=acme" in line and "latest=2" in line
        for line in lines
    )
    moves = [line for line in lines if "event=flow.latest_moved" in line]
    assert moves == [
        "event=flow.latest_moved flow_id=f owner=acme from=1 to=2 reason=higher",
        "event=flow.latest_moved flow_id=f owner=acme from=2 to=1 reason=chosen",
    ]


class RacingRepository(MemoryFlowRepository):
    """Another registration moves the latest between this one's read and its
    compare-and-set, ``races`` times (each time to the next of ``rivals``)."""

    def __init__(self, rivals: list[str]) -> None:
        super().__init__()
        self.rivals = rivals
        self.moves = 0

    async def move_latest(
        self, flow_id: str, version: str, *, owner: FlowOwner, expected: str | None
    ) -> bool:
        self.moves += 1
        if self.rivals:
            rival = self.rivals.pop(0)
            await self.put_if_absent(flow(version=rival, output=f"'{rival}'"), owner=owner)
            assert await super().move_latest(flow_id, rival, owner=owner, expected=expected)
        return await super().move_latest(flow_id, version, owner=owner, expected=expected)


async def test_a_lost_race_reads_the_latest_again_and_decides_again(clock: FakeClock) -> None:
    """The rival moved 1 -> 2 first: 3 is still higher and moves from 2; a rival 4 first
    makes 3 stay below it."""
    repository = RacingRepository(rivals=["2"])
    catalog = FlowCatalog(repository, None, clock=clock)
    await repository.put_if_absent(flow(version="1"), owner=SHARED)

    three = await catalog.register(flow(version="3", output="'three'"), owner=SHARED)

    assert three.latest == LatestDecision("3", "2", LatestReason.HIGHER)
    assert repository.moves == 2
    assert await repository.latest_version("f", owner=SHARED) == "3"

    repository.rivals = ["40"]
    five = await catalog.register(flow(version="5", output="'five'"), owner=SHARED)
    assert five.latest == LatestDecision("5", "40", LatestReason.LOWER)
    assert await repository.latest_version("f", owner=SHARED) == "40"


async def test_a_latest_that_keeps_moving_is_a_named_error_after_bounded_attempts(
    clock: FakeClock,
) -> None:
    # A rival moves the latest before every attempt; 99 stays higher than each of them.
    repository = RacingRepository(rivals=[str(n) for n in range(LATEST_MOVE_ATTEMPTS, 0, -1)])
    catalog = FlowCatalog(repository, None, clock=clock, cache_size=0)
    await repository.put_if_absent(flow(version="0"), owner=SHARED)

    with pytest.raises(FlowLatestContendedError) as raised:
        await catalog.register(flow(version="99", output="'late'"), owner=SHARED)

    assert repository.moves == LATEST_MOVE_ATTEMPTS
    assert "register the same document again" in str(raised.value)
    assert await repository.get("f", "99", owner=SHARED) is not None, "the version is stored"
    healed = await catalog.register(flow(version="99", output="'late'"), owner=SHARED)
    assert healed.is_latest


# --- what a registration checks of the handlers ---------------------------------------------


async def test_a_registration_finds_every_function_and_a_dispatch_check_names_only(
    clock: FakeClock,
) -> None:
    """With a HandlerRegistry a misspelt function is refused at registration; the check
    before a dispatch (``validate``) stays the allowlist, as it was."""
    imported: list[str] = []

    def importer(name: str) -> object:
        imported.append(name)
        return types.SimpleNamespace(always_busy=lambda params, ctx: None)

    catalog = FlowCatalog(
        MemoryFlowRepository(), HandlerRegistry(["mod"], importer=importer), clock=clock
    )
    typo = task_flow("mod:alwys_busy")

    catalog.validate(typo)
    assert imported == []
    with pytest.raises(UnknownHandlerError, match=r"'alwys_busy'.*did you mean 'always_busy'"):
        await catalog.register(typo, owner=SHARED)
    with pytest.raises(UnknownHandlerError):
        await catalog.check_registration(typo, owner=SHARED)
    with tenant_scope("default"), pytest.raises(UnknownFlowError):
        await catalog.get("busy")
    assert (await catalog.register(task_flow("mod:always_busy"), owner=SHARED)).created


async def test_a_names_only_catalog_registers_without_importing(clock: FakeClock) -> None:
    """HandlerAllowlist (the console's): module names compared, nothing imported — a module
    that cannot even be imported is accepted when allowlisted."""
    catalog = FlowCatalog(
        MemoryFlowRepository(), HandlerAllowlist(["no_such_module_anywhere"]), clock=clock
    )

    registered = await catalog.register(
        task_flow("no_such_module_anywhere:alwys_busy"), owner=SHARED
    )

    assert registered.created
    assert "no_such_module_anywhere" not in sys.modules
    with pytest.raises(HandlerNotAllowedError):
        await catalog.register(task_flow("other:f", flow_id="other"), owner=SHARED)


def task_flow(handler: str, flow_id: str = "busy") -> Flow:
    return Flow.from_document(one_task(handler, flow_id))
