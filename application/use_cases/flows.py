"""Registering and looking up flow definitions: the handler allowlist, the owners' rules and
the flow cache (E1, E2, S2, W20, W24)."""

from __future__ import annotations

import logging
from collections import OrderedDict

import attrs

from plaita.application.engine.expressions import compile_flow_expressions
from plaita.application.handlers import HandlerAllowlist
from plaita.application.ports import Clock, FlowRepository
from plaita.application.tenancy import current_tenant
from plaita.domain.errors import (
    FlowLatestContendedError,
    FlowVersionConflictError,
    UnknownFlowError,
)
from plaita.domain.flow import Flow
from plaita.domain.flow_owners import (
    SHARED,
    FlowOwner,
    RegistrationOutcome,
    listing_owners,
    lookup_order,
    registration_outcome,
)
from plaita.domain.flow_versions import LatestDecision, latest_decision, version_key

log = logging.getLogger("plaita.flows")

#: W20 defaults: definitions cached by ``flow_id:version`` (latest when absent).
FLOW_CACHE_SIZE = 100
FLOW_CACHE_TTL_MS = 300_000
#: How often a registration reads the latest again after another registration moved it
#: first (each lost compare-and-set is another registration's move).
LATEST_MOVE_ATTEMPTS = 16


def validate_flow(flow: Flow, handlers: HandlerAllowlist | None) -> None:
    """Refuse a flow whose expressions do not parse or whose handlers are not allowed."""
    compile_flow_expressions(flow)
    if handlers is not None:
        handlers.check_flow(flow)


def validate_registration(flow: Flow, handlers: HandlerAllowlist | None) -> None:
    """``validate_flow``, and what a registration checks of the handlers besides: with a
    ``HandlerRegistry`` that every function is there (``plaita.application.handlers``)."""
    compile_flow_expressions(flow)
    if handlers is not None:
        handlers.check_registration(flow)


@attrs.frozen
class CatalogEntry:
    """A definition and the catalogue it was found in."""

    flow: Flow
    owner: FlowOwner


@attrs.frozen
class FlowVersions:
    """A flow's versions in one catalogue, highest first by the version order, and its latest."""

    flow_id: str
    owner: FlowOwner
    versions: tuple[str, ...]
    latest: str


@attrs.frozen
class Registration:
    """What a registration did: stored or found the version (``outcome``), and what became
    of the owner's latest (``latest``: V1-V5 of ``plaita.domain.flow_versions``)."""

    flow: Flow
    owner: FlowOwner
    outcome: RegistrationOutcome
    latest: LatestDecision

    @property
    def created(self) -> bool:
        return self.outcome is RegistrationOutcome.CREATED

    @property
    def is_latest(self) -> bool:
        """This version is the owner's latest now."""
        return self.latest.is_latest


_CacheKey = tuple[str, str, str | None]


class FlowCatalog:
    """The one door to flow definitions: validates on the way in, resolves a tenant's lookups
    (own catalogue first, then the shared one) and names misses on the way out.

    It caches what executions run (``get``, W20): per tenant, flow id and version (None: the
    latest), at most ``cache_size`` entries (0: none) for ``cache_ttl_ms`` each on
    ``clock``, so a worker does not re-read and re-parse the flow on every dispatch, and a
    latest registered by another process is seen within the TTL. A registration through this
    catalog empties the cache at once. Operator views (``lookup``, ``listing``) always read
    the store.
    """

    def __init__(
        self,
        flows: FlowRepository,
        handlers: HandlerAllowlist | None,
        *,
        clock: Clock,
        cache_size: int = FLOW_CACHE_SIZE,
        cache_ttl_ms: int = FLOW_CACHE_TTL_MS,
    ) -> None:
        self._flows = flows
        self._handlers = handlers
        self._clock = clock
        self._cache_size = cache_size
        self._cache_ttl_ms = cache_ttl_ms
        self._cache: OrderedDict[_CacheKey, tuple[int, CatalogEntry]] = OrderedDict()
        self._validated: set[str] = set()

    def validate(self, flow: Flow) -> None:
        """The check before a dispatch runs ``flow`` (once per document): expressions and
        the allowlist; a missing function fails at its node, as it always did."""
        if flow.fingerprint in self._validated:
            return
        validate_flow(flow, self._handlers)
        self._validated.add(flow.fingerprint)

    # --- registering ----------------------------------------------------------------------

    async def register(self, flow: Flow, *, owner: FlowOwner, latest: bool = False) -> Registration:
        """Store ``flow`` for ``owner``; the same document again changes nothing, another
        document under a registered version is FlowVersionConflictError (S2).

        Then the latest rule (``plaita.domain.flow_versions``): the version becomes the
        owner's latest when it is the first or higher than the latest by the version order,
        or with ``latest`` (an explicit choice: a rollback); else the latest stays. The rule
        applies to the same document again too, so a registration interrupted before it
        moved the latest heals when it is repeated.
        """
        validate_registration(flow, self._handlers)
        stored = await self._flows.put_if_absent(flow, owner=owner)
        try:
            outcome = registration_outcome(flow, stored, owner)
        except FlowVersionConflictError as conflict:
            log.warning(
                "event=flow.version_conflict flow_id=%s version=%s owner=%s registered=%s "
                "given=%s: refused, nothing changed; register the new document under a new "
                "version",
                flow.flow_id,
                flow.version,
                owner.tenant_id or "*",
                conflict.registered_fingerprint,
                conflict.given_fingerprint,
            )
            raise
        decision = await self._settle_latest(flow, owner, explicit=latest)
        if outcome is RegistrationOutcome.CREATED or decision.moves:
            self._cache.clear()
        if outcome is RegistrationOutcome.CREATED:
            log.info(
                "event=flow.registered flow_id=%s version=%s owner=%s fingerprint=%s latest=%s",
                flow.flow_id,
                flow.version,
                owner.tenant_id or "*",
                flow.fingerprint,
                decision.latest,
            )
        if decision.moves and decision.current is not None:
            log.info(
                "event=flow.latest_moved flow_id=%s owner=%s from=%s to=%s reason=%s",
                flow.flow_id,
                owner.tenant_id or "*",
                decision.current,
                flow.version,
                decision.reason.value,
            )
        return Registration(flow, owner, outcome, decision)

    async def _settle_latest(
        self, flow: Flow, owner: FlowOwner, *, explicit: bool
    ) -> LatestDecision:
        """Apply the latest rule to the stored ``flow``: read the latest, decide, move it by
        compare-and-set; a lost race reads again (bounded)."""
        for _ in range(LATEST_MOVE_ATTEMPTS):
            current = await self._flows.latest_version(flow.flow_id, owner=owner)
            decision = latest_decision(flow.version, current, explicit=explicit)
            if not decision.moves:
                return decision
            if await self._flows.move_latest(
                flow.flow_id, flow.version, owner=owner, expected=current
            ):
                return decision
        raise FlowLatestContendedError(
            f"flow {flow.flow_id!r} version {flow.version!r} is registered ({owner}), but its "
            f"latest pointer moved {LATEST_MOVE_ATTEMPTS} times under this registration, "
            "each time by another one: register the same document again to apply the latest "
            "rule"
        )

    async def check_registration(self, flow: Flow, *, owner: FlowOwner) -> RegistrationOutcome:
        """What ``register`` would answer now, writing nothing (to check many files first)."""
        validate_registration(flow, self._handlers)
        stored = await self._flows.get(flow.flow_id, flow.version, owner=owner)
        return registration_outcome(flow, stored, owner)

    # --- what executions run (cached) -----------------------------------------------------

    async def get(self, flow_id: str, version: str | None = None) -> Flow:
        """The definition the current tenant's executions run, or UnknownFlowError."""
        tenant_id = current_tenant()
        key = (tenant_id, flow_id, version)
        cached = self._cached(key)
        if cached is not None:
            return cached.flow
        entry = await self._resolve(flow_id, version, shared_only=False)
        self._remember(key, entry)
        return entry.flow

    # --- operator views (never cached) ----------------------------------------------------

    async def lookup(
        self, flow_id: str, version: str | None = None, *, shared_only: bool = False
    ) -> CatalogEntry:
        """What the current tenant's lookup finds and where, or the shared definition."""
        return await self._resolve(flow_id, version, shared_only=shared_only)

    async def listing(self, *, shared_only: bool = False) -> list[CatalogEntry]:
        """Every flow the current tenant sees, at the latest version its lookups find."""
        entries = []
        for flow_id, owner in await self._visible(shared_only):
            flow = await self._flows.get(flow_id, owner=owner)
            if flow is not None:
                entries.append(CatalogEntry(flow, owner))
        return entries

    async def versions(self, flow_id: str, *, shared_only: bool = False) -> FlowVersions:
        """The versions of ``flow_id`` in the catalogue the current tenant's lookups find it
        in (its own, else the shared one), or UnknownFlowError."""
        entry = await self._resolve(flow_id, None, shared_only=shared_only)
        stored = await self._flows.versions(flow_id, owner=entry.owner)
        ordered = sorted(stored, key=version_key, reverse=True)
        return FlowVersions(flow_id, entry.owner, tuple(ordered), entry.flow.version)

    # --- details --------------------------------------------------------------------------

    async def _resolve(
        self, flow_id: str, version: str | None, *, shared_only: bool
    ) -> CatalogEntry:
        owners = (SHARED,) if shared_only else lookup_order(current_tenant())
        for owner in owners:
            flow = await self._flows.get(flow_id, version, owner=owner)
            if flow is not None:
                return CatalogEntry(flow, owner)
        which = f"{flow_id!r}" if version is None else f"{flow_id!r} version {version!r}"
        where = " or ".join(str(owner) for owner in owners)
        known = ", ".join(flow_id for flow_id, _ in await self._visible(shared_only))
        raise UnknownFlowError(
            f"flow {which} is not registered ({where}; flows found there: {known or 'none'}); "
            "register it with `plaita flows register FILE`"
        )

    async def _visible(self, shared_only: bool) -> list[tuple[str, FlowOwner]]:
        shared_ids = await self._flows.list_ids(owner=SHARED)
        if shared_only:
            return [(flow_id, SHARED) for flow_id in shared_ids]
        tenant_id = current_tenant()
        own_ids = await self._flows.list_ids(owner=FlowOwner.tenant(tenant_id))
        return listing_owners(tenant_id, own_ids, shared_ids)

    def _cached(self, key: _CacheKey) -> CatalogEntry | None:
        if key not in self._cache:
            return None
        expires_at, entry = self._cache[key]
        if expires_at <= self._clock.now_ms():
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        return entry

    def _remember(self, key: _CacheKey, entry: CatalogEntry) -> None:
        if self._cache_size <= 0:
            return
        self._cache[key] = (self._clock.now_ms() + self._cache_ttl_ms, entry)
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
